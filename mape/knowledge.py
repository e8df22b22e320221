"""Knowledge: what the loop has learned, as one object the phases share, and its saved form.

`to_state` / `from_state` turn it into JSON-serialisable parts (the forecaster's model as bytes) and back,
part by part: a part that cannot be read starts fresh, said, the rest kept. The durable store is
mape/knowledge_store.py.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import structlog

from capacity.cores import CoreModel
from capacity.dag import DagModel, DagSettings
from capacity.model import CapacityModel, CapacitySettings
from capacity.track_record import CapacityTrackRecord
from forecasting.online import ModelSource, WorkloadForecaster
from forecasting.types import ForecastSettings
from mape.extension_state import ExtensionState
from mape.plausibility import Ledger
from messages.types import CompletedRescale, Decision, JobGraph
from recovery.downtime import DowntimeModel
from recovery.monitor import RecoveryMonitor
from recovery.tracker import ObservedRecovery

RECENT_DECISIONS = 100
RECENT_RESCALE_TIMES = 256
"""Times of the last rescales kept: a rescale budget counts those of the last hour."""
CORE_STATE = (
    "capacity",
    "dag",
    "cores",
    "track_record",
    "forecaster",
    "downtime",
    "recovery",
    "plausibility",
    "loop",
    "rescales",
)
"""The core's keys in the saved state; an extension's state is saved under its name beside them."""
RECENT_RESCALES = 50


@dataclass(frozen=True)
class KnowledgeSettings:
    """How to build each learned model, fresh or from its saved state."""

    capacity: CapacitySettings = field(default_factory=CapacitySettings)
    dag: DagSettings = field(default_factory=DagSettings)
    forecast: ForecastSettings = field(default_factory=ForecastSettings)
    downtime_out_s: float = 30.0
    downtime_in_s: float = 15.0
    downtime_window: int = 20
    anomaly_k: float = 1.0
    observe_timeout_s: float | None = None
    executor: Callable[[], Executor | None] = lambda: None
    """Runs fits and recovery watches off the loop: None = a thread each; an inline one in simulations."""
    model_source: Callable[[], ModelSource | None] = lambda: None
    """Where the forecaster finds retrained models (the registry, forecasting/registry.py); None = none."""
    extension_factories: dict[str, Callable[[dict], ExtensionState]] = field(default_factory=dict)
    """Per analysis extension (mape/extensions.py), how to rebuild its state from the saved dict ({} when
    none was saved); its name is its key in the saved state, so it must not be one of the core's."""

    def __post_init__(self) -> None:
        for name in self.extension_factories:
            if not name.isidentifier() or name in CORE_STATE:
                raise ValueError(f"knowledge extension name {name!r} is not an identifier or is taken")


@dataclass
class Knowledge:
    """Everything that must survive a restart of the daemon."""

    capacity: CapacityModel = field(default_factory=CapacityModel)
    dag: DagModel = field(default_factory=DagModel)
    """Per-vertex true rates, selectivities and key-group loads (the job graph's capacity)."""
    cores: CoreModel = field(default_factory=CoreModel)
    """CPU per busy second: each TaskManager's core as a limit of the job graph."""
    track_record: CapacityTrackRecord = field(default_factory=CapacityTrackRecord)
    """How far the capacity predicted for a rescale's target was above what it showed once running."""
    forecaster: WorkloadForecaster = field(default_factory=lambda: WorkloadForecaster(ForecastSettings()))
    downtime: DowntimeModel = field(default_factory=DowntimeModel)
    recovery: RecoveryMonitor = field(default_factory=RecoveryMonitor)
    extensions: dict[str, ExtensionState] = field(default_factory=dict)
    """What the analysis extensions learned, by name (e.g. capacity per memory level, memory/analysis.py)."""
    iteration: int = 0
    last_time_s: float | None = None
    last_rescale_s: float | None = None
    last_target_scaleout: int | None = None
    rescale_times_s: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_RESCALE_TIMES))
    """When the last rescales were executed (the rescale budget's record)."""
    recent_decisions: deque[Decision] = field(default_factory=lambda: deque(maxlen=RECENT_DECISIONS))
    new_recoveries: list[ObservedRecovery] = field(default_factory=list)
    """Recoveries observed this iteration: stored with it, then cleared."""
    plausibility: Ledger = field(default_factory=Ledger)
    """Recent plausible observations, the conservation check's reference (mape/plausibility.py)."""
    rescales: deque[CompletedRescale] = field(default_factory=lambda: deque(maxlen=RECENT_RESCALES))
    """The last rescales the execute side measured from request to running (the per-vertex path's
    downtimes, to learn its recovery from)."""
    seeded_for: tuple[str, ...] | None = None
    """The vertex names of the job a capacity plan seeded this store for, until the daemon saw its job's
    graph (`check_seeded_job`)."""

    @property
    def informed(self) -> bool:
        """Whether it knows a capacity before this daemon's first iteration: a store a capacity plan seeded
        (daemon/plan_output.py) or one a daemon already ran on."""
        return self.iteration > 0 or bool(self.capacity.observed) or bool(self.dag.seeds)

    def seeded_for_another_job(self, vertex_names: Iterable[str]) -> bool:
        """Whether a capacity plan seeded this store for a job whose vertices are not these."""
        return self.seeded_for is not None and tuple(sorted(vertex_names)) != self.seeded_for

    def check_seeded_job(self, graph: JobGraph) -> None:
        """The first job graph after a capacity plan seeded the store: when its vertex names are not the
        planned job's, the seeds are another job's capacities (a plan of the testbed's load job, or of
        another job, given to this daemon's knowledge.path), and whatever of them the daemon has not
        learned over yet is dropped, said once: the daemon starts cold instead of misled. Checked once."""
        names = tuple(sorted(v.name for v in graph.vertices))
        planned, another = self.seeded_for, self.seeded_for_another_job(names)
        self.seeded_for = None
        if not another:
            return
        scaleouts = self.capacity.forget_seeded()
        for state in self.extensions.values():
            forget = getattr(state, "forget_seeded", None)
            if callable(forget):
                forget()
        self.dag.seeds.clear()
        if self.cores.stats.n and not self.iteration:  # the plan's points alone: learned with a graph only
            self.cores = CoreModel(self.cores.settings)
        structlog.get_logger("foresail.knowledge").error(
            "knowledge-seeded-for-another-job",
            planned_vertices=list(planned),
            job_vertices=list(names),
            dropped_scaleouts=scaleouts,
            reason="the store was seeded by a capacity plan of another job: its capacities are not this "
            "job's, the daemon learns its own",
        )

    def remember_rescales(self, completed: tuple[CompletedRescale, ...]) -> None:
        """Keeps the measured ones (a per-vertex rescale whose timestamps Flink did not give has NaN)."""
        self.rescales.extend(r for r in completed if math.isfinite(r.downtime_s))

    def record_rescale(self, time_s: float, target_scaleout: int) -> None:
        """An executed rescale: when (the stabilization, the budget) and to which scale-out."""
        self.last_rescale_s = time_s
        self.last_target_scaleout = target_scaleout
        self.rescale_times_s.append(time_s)

    def withdraw_rescales(self, requested_s: Iterable[float]) -> list[float]:
        """Forgets the recorded rescales requested at these times (they never went out); those found."""
        withdrawn = []
        for time_s in requested_s:
            if time_s in self.rescale_times_s:
                self.rescale_times_s.remove(time_s)
                withdrawn.append(time_s)
        if self.last_rescale_s in withdrawn:
            self.last_rescale_s = max(self.rescale_times_s, default=None)
        return withdrawn

    def rescales_after_now(self, now_s: float) -> float:
        """Seconds by which the latest recorded rescale lies after `now_s` (0 when none does), having moved
        every such record to `now_s`. A clock stepped back (or a store from a host whose clock ran ahead)
        left the stabilization reading a negative age and holding until the clock caught up (an hour's
        step: an hour's hold, a surge foreseen or not); as far as this clock knows, they just happened."""
        ahead_s = max(
            (t - now_s for t in (*self.rescale_times_s, self.last_rescale_s or -math.inf)), default=0.0
        )
        if not ahead_s > 0:
            return 0.0
        self.rescale_times_s = deque(
            (min(t, now_s) for t in self.rescale_times_s), self.rescale_times_s.maxlen
        )
        if self.last_rescale_s is not None:
            self.last_rescale_s = min(self.last_rescale_s, now_s)
        # the decisions too: the plan finds the last rescale's decision by its time (a surge's hold)
        self.recent_decisions = deque(
            (replace(d, time_s=min(d.time_s, now_s)) for d in self.recent_decisions),
            self.recent_decisions.maxlen,
        )
        return ahead_s

    def rescales_since(self, time_s: float) -> int:
        """Rescales executed after `time_s`."""
        return sum(1 for t in self.rescale_times_s if t > time_s)

    def rescale_budget_spent(self, time_s: float, max_rescales_per_h: float | None) -> str:
        """Why a scale-in waits for the rescale budget at `time_s` ('' when it need not): the last hour
        holds the budget less one rescale, and the last one stays free for a scale-out the load needs."""
        if max_rescales_per_h is None:
            return ""
        recent = self.rescales_since(time_s - 3600.0)
        if recent < max_rescales_per_h - 1:
            return ""
        return (
            f"rescale budget: {recent} rescales in the last hour of {max_rescales_per_h:g} "
            "(the last one is kept for a scale-out)"
        )

    @classmethod
    def fresh(cls, settings: KnowledgeSettings) -> Knowledge:
        return cls.from_state({}, settings)

    @classmethod
    def from_state(
        cls,
        state: dict[str, Any],
        settings: KnowledgeSettings,
        log: structlog.typing.FilteringBoundLogger | None = None,
        *,
        strict: bool = False,
        unreadable: list[str] | None = None,
    ) -> Knowledge:
        """Rebuild from `to_state()` output; missing parts start fresh. So does a part that cannot be read
        (another version's forecaster state after a downgrade, a truncated or hand-edited one), said in one
        line and named in `unreadable`: the rest is kept, where one such part used to cost the whole store
        (`_restored`). `strict` raises instead, for a caller that has a whole copy to try first
        (`KnowledgeStore.load`)."""
        log = log or structlog.get_logger("foresail.knowledge")
        monitor_options = {"timeout_s": settings.observe_timeout_s, "k_std": settings.anomaly_k}
        executor, source = settings.executor(), settings.model_source()

        def part(name: str, restore: Callable[[Any], Any], fresh: Callable[[], Any]) -> Any:
            return _restored(state, name, restore, fresh, None if strict else log, unreadable)

        def fresh_forecaster() -> WorkloadForecaster:
            return WorkloadForecaster(settings.forecast, executor, model_source=source)

        def fresh_downtime() -> DowntimeModel:
            return DowntimeModel(settings.downtime_out_s, settings.downtime_in_s, settings.downtime_window)

        knowledge = cls(
            capacity=part(
                "capacity",
                lambda data: CapacityModel.from_dict(data, settings.capacity),
                lambda: CapacityModel.from_dict({}, settings.capacity),
            ),
            dag=part(
                "dag",
                lambda data: DagModel.from_dict(data, settings.dag),
                lambda: DagModel.from_dict({}, settings.dag),
            ),
            cores=part(
                "cores",
                lambda data: CoreModel.from_dict(data, settings.capacity),
                lambda: CoreModel.from_dict({}, settings.capacity),
            ),
            track_record=part(
                "track_record", CapacityTrackRecord.from_dict, lambda: CapacityTrackRecord.from_dict({})
            ),
            forecaster=part(
                "forecaster",
                lambda data: (
                    WorkloadForecaster.from_state(data, settings.forecast, executor, model_source=source)
                    if data
                    else fresh_forecaster()
                ),
                fresh_forecaster,
            ),
            downtime=part(
                "downtime", lambda data: DowntimeModel.from_dict(data, fresh_downtime()), fresh_downtime
            ),
            recovery=part(
                "recovery",
                lambda data: RecoveryMonitor.from_dict(data, settings.executor(), **monitor_options),
                lambda: RecoveryMonitor(settings.executor(), **monitor_options),
            ),
            extensions={
                name: part(name, make, lambda make=make: make({}))
                for name, make in settings.extension_factories.items()
            },
            plausibility=part("plausibility", Ledger.from_dict, lambda: Ledger.from_dict({})),
        )
        knowledge.rescales.extend(part("rescales", lambda data: _rescales(data, log), list))
        loop = part("loop", _loop, lambda: _loop({}))
        knowledge.iteration = loop["iteration"]
        knowledge.last_time_s = loop["last_time_s"]
        knowledge.last_rescale_s = loop["last_rescale_s"]
        knowledge.last_target_scaleout = loop["last_target_scaleout"]
        knowledge.rescale_times_s.extend(loop["rescale_times_s"])
        knowledge.seeded_for = loop["seeded_for"]
        return knowledge

    def to_state(self, with_forecaster: bool = True) -> dict[str, Any]:
        """JSON-serialisable parts by key; the forecaster's fitted model rides along as bytes."""
        state: dict[str, Any] = {
            "capacity": self.capacity.to_dict(),
            "dag": self.dag.to_dict(),
            "cores": self.cores.to_dict(),
            "track_record": self.track_record.to_dict(),
            "downtime": self.downtime.to_dict(),
            "recovery": self.recovery.to_dict(),
            "plausibility": self.plausibility.to_dict(),
            "rescales": [asdict(r) for r in self.rescales],
            "loop": {
                "iteration": self.iteration,
                "last_time_s": self.last_time_s,
                "last_rescale_s": self.last_rescale_s,
                "last_target_scaleout": self.last_target_scaleout,
                "rescale_times_s": list(self.rescale_times_s),
                "seeded_for": None if self.seeded_for is None else list(self.seeded_for),
            },
        }
        if with_forecaster:
            state["forecaster"] = self.forecaster.state_dict()
        state.update((name, extension.to_dict()) for name, extension in self.extensions.items())
        return state

    def close(self) -> None:
        """Stop background work (pending fits and watches are abandoned; their inputs are saved)."""
        self.forecaster.close()
        self.recovery.close()


def _restored(
    state: dict[str, Any],
    name: str,
    restore: Callable[[Any], Any],
    fresh: Callable[[], Any],
    log: structlog.typing.FilteringBoundLogger | None,
    unreadable: list[str] | None = None,
) -> Any:
    """Part `name` of the saved state, or a fresh one where it is missing or cannot be read: one line names
    the part and the error, and the next save replaces it (without a `log`, the error is raised)."""
    if state.get(name) is None:
        return fresh()
    try:
        return restore(state[name])
    except Exception as error:  # whatever a part's reader raises costs that part only
        if log is None:
            raise
        log.error(
            "knowledge-store-part-unreadable",
            part=name,
            error=f"{type(error).__name__}: {error}"[:300],
            action="this part starts fresh; the rest of the knowledge is kept",
        )
        if unreadable is not None:
            unreadable.append(name)
        return fresh()


def _loop(loop: dict[str, Any]) -> dict[str, Any]:
    """The loop's counters. The iteration and the rescale times are converted here, so that a value of the
    wrong type fails this part, not the loop later; the stored time and scale-out are judged where the
    daemon resumes (`stored-time-ignored`, `stored-scaleout-ignored`), keeping the iteration."""
    seeded_for = loop.get("seeded_for")
    seeded = isinstance(seeded_for, list) and seeded_for and all(isinstance(n, str) for n in seeded_for)
    return {
        "iteration": int(loop.get("iteration", 0)),
        "last_time_s": loop.get("last_time_s"),
        "last_rescale_s": None if loop.get("last_rescale_s") is None else _finite(loop["last_rescale_s"]),
        "last_target_scaleout": loop.get("last_target_scaleout"),
        "rescale_times_s": [_finite(t) for t in loop.get("rescale_times_s", [])],
        "seeded_for": tuple(sorted(seeded_for)) if seeded else None,
    }


def _finite(value: Any) -> float:
    """A stored time as a float; one that is no finite number fails its part."""
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{value!r} is no finite time")
    return number


def _rescales(entries: list, log: structlog.typing.FilteringBoundLogger | None) -> list[CompletedRescale]:
    """The stored rescales, read one by one: keys a newer version added are ignored and an entry that is
    not a rescale is dropped with a warning, so one bad entry does not cost the rest of the knowledge."""
    rescales, dropped, ignored = [], 0, set()
    for entry in entries:
        try:
            granularity = entry["granularity"]
            if granularity not in ("job", "vertex"):
                raise ValueError(granularity)
            rescales.append(
                CompletedRescale(
                    requested_s=float(entry["requested_s"]),
                    finished_s=float(entry["finished_s"]),
                    granularity=granularity,
                    vertex_parallelism={
                        str(k): int(v) for k, v in entry.get("vertex_parallelism", {}).items()
                    },
                )
            )
            ignored.update(set(entry) - {f.name for f in fields(CompletedRescale)})
        except (KeyError, TypeError, ValueError, AttributeError):
            dropped += 1
    if dropped or ignored:
        (log or structlog.get_logger("foresail.knowledge")).warning(
            "knowledge-store-part-skipped",
            part="rescales",
            dropped_entries=dropped,
            ignored_keys=sorted(ignored),
        )
    return rescales
