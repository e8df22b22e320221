"""The per-vertex analysis in the loop: which model bounds the capacity, the bottleneck, the fallback."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import structlog

from capacity.cores import CoreModel
from capacity.dag import DagModel, DagSettings
from config.schema import Config
from daemon.build import knowledge_settings, make_loop
from mape.knowledge_store import KnowledgeStore
from mape.vertex_analysis import analyse_vertices
from messages.types import JobEdge, JobGraph, JobVertex, Observation, SubtaskSeries, WorkerSeries
from simulator.metrics import TwinMetricsSource, TwinScalingTarget
from simulator.params import TwinParams
from simulator.topology import load_topology
from simulator.twin import Twin


class _Capture:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def msg(self, **event) -> None:
        self.events.append(event)

    info = warning = error = msg


def _loop(topology: str, model: str, trace: np.ndarray, parallelism: int, strip_vertices: bool = False):
    """A policy that never rescales (static at the start), so the analysis is seen at one deployment."""
    sizing = Twin(np.full(10, 12_000.0), TwinParams(), topology=load_topology(topology))
    params = TwinParams(worker_capacity_rps=sizing.worker_capacity_rps, speed_cov=0.05)
    twin = Twin(trace, params, parallelism=parallelism, topology=load_topology(topology))
    config = Config.model_validate(
        {
            "scaling": {"policy": "static"},
            "baselines": {"static_scaleout": parallelism},
            "capacity": {"model": model},
        }
    )
    source = TwinMetricsSource(twin)
    if strip_vertices:  # a backend without task metrics
        observe = source.observe
        source.observe = lambda now, window: dataclasses.replace(
            observe(now, window), job_graph=None, subtasks=()
        )
    store = KnowledgeStore(":memory:")
    capture = _Capture()
    loop = make_loop(
        config,
        source,
        TwinScalingTarget(twin),
        store.load(knowledge_settings(config)),
        store,
        structlog.wrap_logger(capture, processors=[]),
    )
    results = []
    for now_s in range(60, len(trace) + 1, 60):
        twin.advance_to(now_s)
        results.append(loop.iterate(now_s))
    return twin, results, capture.events


TWO = JobGraph(
    (JobVertex("v0", "source", 1, 1), JobVertex("v1", "op", 1, 128)), (JobEdge("v0", "v1", "REBALANCE"),)
)


def _subtasks(stamps: np.ndarray, busy_held_ms: dict[str, tuple[float, float]]) -> tuple[SubtaskSeries, ...]:
    """One subtask a vertex on tm-0, 200 records/s in and out, busy and backpressured ms/s as given."""
    n = len(stamps)
    return tuple(
        SubtaskSeries(vertex, 0, "tm-0", stamps, *(np.full(n, v) for v in (200.0, 200.0, busy, held, 0.0)))
        for vertex, (busy, held) in busy_held_ms.items()
    )


RAMP = np.linspace(2_000.0, 9_000.0, 3_600)  # four workers carry ~4,000 rps of io-sink: saturates


def test_a_store_bound_sink_is_named_and_true_rates_bound_the_capacity():
    twin, results, events = _loop("io-sink", "dag", RAMP, parallelism=4)
    last = results[-1].assessment
    assert twin.true_bottleneck() == "sink"
    assert last.bottleneck_vertex == "sink" and last.capacity_model == "dag"
    before = next(r.assessment for r in results if r.time_s == 1_140)  # not saturated yet
    assert before.capacity_model == "dag" and before.bottleneck_vertex == "sink"
    assert "the cores would carry" in before.capacity_model_reason
    assert "the vertex waits more than it computes" in before.capacity_model_reason
    assert last.capacity(4) == pytest.approx(twin.true_capacity_rps(), rel=0.03)
    audit = json.loads(json.dumps(events[-1]["dag"]))
    assert audit["bottleneck_vertex"] == "sink" and audit["model"] == "dag"
    assert {v["name"] for v in audit["vertices"]} == {"source", "enrich", "sink"}
    sink = next(v for v in audit["vertices"] if v["name"] == "sink")
    assert sink["utilization"] == pytest.approx(1.0)
    # DS2's walk from the ~9,000 rps the job now sees: 4,400 rps at 4 sink subtasks -> 9 of them
    assert sink["needed_parallelism"] == 9


def test_the_job_level_model_alone_over_promises_on_the_same_job_until_it_saturates():
    twin, results, _ = _loop("io-sink", "job", RAMP, parallelism=4)
    before = next(r.assessment for r in results if r.time_s == 1_140)  # ~4,200 of 4,400 rps: not saturated
    assert before.backlog_records < 30 * 4_400 and before.capacity_model == "job" and before.vertices == ()
    assert before.capacity(4) > 1.5 * twin.true_capacity_rps()
    _, results, _ = _loop("io-sink", "dag", RAMP, parallelism=4)
    before = next(r.assessment for r in results if r.time_s == 1_140)
    assert before.capacity(4) == pytest.approx(twin.true_capacity_rps(), rel=0.03)


def test_when_the_cores_bind_first_the_cores_limit_is_trusted_and_says_so():
    twin, results, _ = _loop("wordcount", "dag", RAMP, parallelism=4)
    # the last loop before the job saturates (a saturated job's throughput is its capacity, measured)
    last = [r.assessment for r in results if r.assessment.backlog_records < r.assessment.workload_avg_rps][-1]
    assert twin.true_bottleneck() == "cpu"
    assert last.capacity_model == "cores" and "share each TaskManager's core" in last.capacity_model_reason
    assert last.bottleneck_vertex == "count"  # the vertex using most of the core
    assert last.capacity(4) == pytest.approx(twin.true_capacity_rps(), rel=0.03)


def test_missing_task_metrics_fall_back_to_the_job_level_model_without_holding():
    _, results, events = _loop("io-sink", "dag", RAMP[:1200], parallelism=4, strip_vertices=True)
    last = results[-1]
    assert last.assessment.capacity_model == "job" and not last.assessment.problems
    assert events[-1]["dag"]["reason"] == "no per-vertex metrics: job-level model"
    assert last.decision.rule != "hold-bad-data"


def test_no_window_of_the_first_gauge_minute_after_a_restart_is_learned():
    # Flink's busy time is a 60 s average: a task restarted 45 s ago reads busy all the time at a trickle,
    # which is no saturated reading, even where the job-level warm-up is shorter (8 s on the e2e stack)
    stamps = np.arange(25.0, 45.0, 1.0)
    trickle = _subtasks(stamps, {"v0": (100.0, 900.0), "v1": (1000.0, 0.0)})
    observation = Observation(
        45.0, 20.0, stamps, np.full(len(stamps), 200.0), (), 0.0, 1, 45.0, job_graph=TWO, subtasks=trickle
    )
    young = DagModel(DagSettings(warmup_s=8.0))
    analyse_vertices(observation, young, CoreModel(), {1: 5000.0}, {1: "observed"}, 1, 2, {}, False)
    assert young.rates == {} and young.saturated == {}
    settled = dataclasses.replace(observation, uptime_s=120.0)  # the same readings a minute later count
    analyse_vertices(settled, young, CoreModel(), {1: 5000.0}, {1: "observed"}, 1, 2, {}, False)
    assert young.subtask_rate_rps("v1", 1, 0) == pytest.approx(200.0)


def test_the_cores_line_forgets_by_the_loop_interval_not_the_metrics_window():
    """loop.window_s may differ from loop.interval_s: a 300 s window on a 60 s loop faded the line five
    times a day's worth per day (a half-life of 4.8 hours)."""
    graph = JobGraph(
        (JobVertex("v0", "source", 1, 1), JobVertex("v1", "op", 1, 128)), (JobEdge("v0", "v1", "REBALANCE"),)
    )
    stamps = np.arange(100.0, 400.0, 5.0)
    n = len(stamps)
    subtasks = tuple(
        SubtaskSeries(
            vertex, 0, "tm-0", stamps, *(np.full(n, v) for v in (200.0, 200.0, busy, 0.0, 1000.0 - busy))
        )
        for vertex, busy in (("v0", 100.0), ("v1", 400.0))
    )
    observation = Observation(
        400.0, 300.0, stamps, np.full(n, 200.0), (), 0.0, 1, 4_000.0, job_graph=graph, subtasks=subtasks
    )
    faded: list[float] = []

    class Recording(CoreModel):
        def learn(self, busy, cpu, interval_s):
            faded.append(interval_s)
            super().learn(busy, cpu, interval_s)

    analyse_vertices(
        observation,
        DagModel(DagSettings()),
        Recording(),
        {1: 5000.0},
        {1: "observed"},
        1,
        2,
        {"tm-0": 0.5},
        False,
        60.0,
    )
    assert faded == [60.0]


def _held_window(rate_rps: float, cpu: float, parallelism: int | None, uptime_s: float | None):
    """A job of one busy operator (1,000 ms/s at 200 rps, its source backpressured): a saturated reading."""
    stamps = np.arange(405.0, 465.0, 5.0)
    n = len(stamps)
    subtasks = _subtasks(stamps, {"v0": (100.0, 900.0), "v1": (1000.0, 0.0)})
    workers = (WorkerSeries("tm-0", stamps, np.full(n, cpu), np.full(n, 200.0)),)
    rates = np.full(n, rate_rps)
    return Observation(
        460.0, 60.0, stamps, rates, workers, 0.0, parallelism, uptime_s, job_graph=TWO, subtasks=subtasks
    )


@pytest.mark.parametrize(
    ("rate_rps", "cpu", "parallelism", "uptime_s", "learns"),
    [
        (200.0, 0.5, 1, 4_000.0, True),
        (-50.0, 0.5, 1, 4_000.0, False),  # implausible: a negative input rate
        (200.0, 40.0, 1, 4_000.0, False),  # implausible: CPU in percent
        (200.0, 0.5, 1, None, False),  # no uptime: a restart's warm-up cannot be cut
        (200.0, 0.5, None, 4_000.0, False),  # no parallelism: the samples would be filed under a guess
    ],
    ids=["plausible", "negative-rate", "cpu-in-percent", "no-uptime", "no-parallelism"],
)
def test_a_window_the_loop_cannot_trust_teaches_no_model(rate_rps, cpu, parallelism, uptime_s, learns):
    """The job-level lines skipped implausible windows, the true rates and the saturated rates did not,
    and neither skipped a window without uptime or parallelism: one such window lowered the capacity
    learned at scale-out 2 by 9%, and the store keeps it."""
    config = Config()
    store = KnowledgeStore(":memory:")
    knowledge = store.load(knowledge_settings(config))
    loop = make_loop(config, None, None, knowledge, store)
    loop.analyzer.assess(_held_window(rate_rps, cpu, parallelism, uptime_s), knowledge)
    job_samples = sum(line.stats.n for line in knowledge.capacity.workers.values())
    learned = (job_samples > 0, bool(knowledge.dag.rates), bool(knowledge.dag.saturated))
    assert learned == (learns, learns, learns)
    if not learns:  # nor the cores' line (a saturated window teaches it nothing anyway)
        assert knowledge.cores.stats.n == 0


def test_the_bottleneck_is_named_by_its_vertex_not_a_name_another_shares():
    """Flink names vertices by their operators, so two `Map`s are common: the reason quoted the first
    `Map`'s utilization (20%) for the second, which binds busy all the time."""
    graph = JobGraph(
        (JobVertex("v0", "Source", 1, 1), JobVertex("v1", "Map", 1, 128), JobVertex("v2", "Map", 1, 128)),
        (JobEdge("v0", "v1", "FORWARD"), JobEdge("v1", "v2", "REBALANCE")),
    )
    stamps = np.arange(405.0, 465.0, 5.0)
    subtasks = _subtasks(stamps, {"v0": (100.0, 900.0), "v1": (200.0, 800.0), "v2": (1000.0, 0.0)})
    observation = Observation(
        460.0,
        60.0,
        stamps,
        np.full(len(stamps), 200.0),
        (),
        0.0,
        1,
        4_000.0,
        job_graph=graph,
        subtasks=subtasks,
    )
    saturated = True  # behind its load: the measured rates bind, not the cores' prior
    view = analyse_vertices(
        observation, DagModel(DagSettings()), CoreModel(), {1: 5000.0}, {1: "observed"}, 1, 2, {}, saturated
    )
    assert view.model == "dag" and "at busy 100%" in view.reason
