"""End to end, per vertex: Flink 2.3 on the adaptive scheduler (not reactive mode) running the chain job
(source → parse → keyed burn → waiting sink, chaining off), scraped by a real Prometheus; foresail's loop
with the local per-vertex target (TaskManager processes + Flink's REST resource requirements).

Sink-bound (the sink waits per record, so its capacity is 10^6 / wait per subtask whatever the machine's
load): a load above one sink subtask makes the analysis name the sink the bottleneck, and the loop raises
that vertex only, through REST, starting a TaskManager first; Flink then runs it at the new parallelism
(read from /jobs/:jobid) while every other vertex stays at 1. The rescale's measured downtime (PUT → last
subtask RUNNING, Flink's own timestamps) reaches the knowledge store. When the load falls, the sink is
lowered again and the TaskManager left without tasks is stopped.

Decisions come from the test-side per-vertex policy in tests/e2e/vertex.py until the real one is merged.
"""

from __future__ import annotations

import time

import pytest

from backends.flinkrest import FlinkRest
from backends.vertex_rescale import ReactiveModeRefused, VertexRescaler
from mape.knowledge import KnowledgeStore
from tests.e2e.dag import SOURCE, STORE, DagStack
from tests.e2e.scenario import daemon_config, record_figures
from tests.e2e.stack import FlinkStack, PrometheusServer, compile_job, flink_home, wait_for
from tests.e2e.vertex import VERTEX_FLINK_CONF, vertex_loop

pytestmark = pytest.mark.e2e

SINK_WAIT_US = 5_000
"""200 records/s per sink subtask."""
WIDEST_VERTEX_THROUGHPUT = (
    'sum by (tm_id) (rate(flink_taskmanager_job_task_operator_numRecordsIn{operator_name=~"store.*"}[10s]))'
)
HIGH_RPS, LOW_RPS = 300, 60
"""1.5× one sink subtask (needs 2), then well within one."""


@pytest.fixture(scope="module")
def adaptive(tmp_path_factory) -> DagStack:
    workdir = tmp_path_factory.mktemp("vertex-stack")
    home = flink_home()
    compile_job(home, workdir / "build")
    wait_file = workdir / "sink-wait-us"
    wait_file.write_text(f"{SINK_WAIT_US}\n")
    flink = FlinkStack(
        workdir / "flink",
        home,
        work=100_000,
        initial_rps=LOW_RPS,
        job_args=("--topology", "chain", "--sink-wait-file", str(wait_file)),
        conf=VERTEX_FLINK_CONF,
    )
    prometheus = PrometheusServer(workdir / "prometheus", flink.scrape_targets)
    try:
        flink.start(taskmanagers=1)
        stack = DagStack(flink, prometheus, wait_file)
        start_ms = wait_for(
            lambda: stack.value("max(flink_taskmanager_job_task_operator_traceStartMs)"),
            60,
            "the load job's trace start in Prometheus",
        )
        flink.trace.anchor(start_ms / 1000)
        yield stack
    finally:
        flink.stop()
        prometheus.stop()


def _running(flink: FlinkStack) -> dict[str, int]:
    """Vertex name → parallelism, from /jobs/:jobid (every vertex RUNNING), or {} while not."""
    status = flink.rest.job_status()
    if status is None:
        return {}
    running = flink.rest.running_vertex_parallelism(status.job_id)
    if running is None:
        return {}
    names = {v.vertex_id: v.name for v in flink.rest.job_graph().vertices}
    return {names[v]: p for v, p in running.items()}


def test_the_bottleneck_vertex_alone_is_raised_through_rest_and_lowered_when_the_load_falls(
    adaptive, tmp_path
):
    flink, started = adaptive.flink, time.monotonic()
    config = daemon_config(flink, adaptive.prometheus.url, tmp_path, {"kind": "prometheus+local-flink"})
    # a baseline's name turns the forecaster off (daemon/build.py): each vertex's needed parallelism then
    # comes from the window's peak input, not from a forecaster extrapolating two minutes of history
    config["scaling"] |= {"policy": "ds2", "stabilization_s": 15}
    # a worker's throughput: the records of the widest vertex's subtask on it (the sink: each TaskManager
    # carries one of its subtasks); the job-level default meters burn, which runs on one TaskManager only
    config["prometheus"]["query_worker_throughput"] = WIDEST_VERTEX_THROUGHPUT
    with vertex_loop(config, flink, tmp_path, interval_s=5) as loop:
        rise_s = flink.trace.hold(HIGH_RPS)
        raised = wait_for(lambda: loop.executed("test-raise-bottleneck"), 240, "the bottleneck vertex raised")
        decision = raised.decision
        names = {v.vertex_id: v.name for v in raised.assessment.vertices}
        changed = {names[v]: p for v, p in decision.target_vertex_parallelism.items() if p != 1}
        assert raised.assessment.bottleneck_vertex == STORE
        assert changed == {STORE: 2}, decision  # only the bottleneck vertex
        assert decision.target_scaleout == 2  # one slot per TaskManager: a second one
        at_two = wait_for(lambda: _running(flink).get(STORE) == 2 and _running(flink), 120, "the sink at 2")
        assert at_two == {SOURCE: 1, "parse": 1, "burn": 1, STORE: 2}
        assert len(flink.cluster.taskmanagers()) == 2
        completed = wait_for(
            lambda: next((r.observation.completed_rescales for r in loop.snapshot() if r.observation and
                          r.observation.completed_rescales), None),
            60,
            "the completed rescale in an observation",
        )  # fmt: skip
        up = completed[0]
        assert up.granularity == "vertex" and up.vertex_parallelism[decision_id(decision, names, STORE)] == 2
        assert 0 < up.downtime_s < 60, up

        fall_s = flink.trace.hold(LOW_RPS)
        lowered = wait_for(lambda: loop.executed("test-lower-vertices"), 240, "the sink lowered")
        assert {names[v]: p for v, p in lowered.decision.target_vertex_parallelism.items()} == {
            SOURCE: 1, "parse": 1, "burn": 1, STORE: 1,
        }  # fmt: skip
        wait_for(
            lambda: _running(flink) == {SOURCE: 1, "parse": 1, "burn": 1, STORE: 1}, 120, "every vertex at 1"
        )
        wait_for(lambda: len(flink.cluster.taskmanagers()) == 1, 120, "the free TaskManager stopped")
        restarts_before = adaptive.value("max(flink_jobmanager_job_numRestarts)")
        down = wait_for(
            lambda: [c for r in loop.snapshot() if r.observation for c in r.observation.completed_rescales][
                1:
            ],
            60,
            "the scale-down's completed rescale",
        )[0]
    knowledge = KnowledgeStore(config["knowledge"]["path"]).load()
    assert [round(r.downtime_s, 3) for r in knowledge.rescales] == [
        round(up.downtime_s, 3),
        round(down.downtime_s, 3),
    ]
    # the TaskManager stopped had no task left: the job did not restart for it
    assert flink.rest.job_status().running
    record_figures(
        "per-vertex-local-flink",
        {
            "scenario_s": round(time.monotonic() - started, 1),
            "load_rise_to_decision_s": round(raised.time_s - rise_s, 1),
            "load_fall_to_decision_s": round(lowered.time_s - fall_s, 1),
            "scale_up_downtime_s": round(up.downtime_s, 2),
            "scale_down_downtime_s": round(down.downtime_s, 2),
            "restarts_after_scale_down": restarts_before,
        },
    )


def decision_id(decision, names: dict[str, str], name: str) -> str:
    return next(v for v in decision.target_vertex_parallelism if names[v] == name)


def test_reactive_mode_refuses_per_vertex_requirements_with_a_configuration_error(stack):
    """The session's reactive-mode cluster: the PUT is refused with HTTP 500, named as a configuration
    error (what check-config reports before the daemon runs)."""
    rest = FlinkRest(stack.flink.rest_url)
    assert rest.scheduler() == "reactive"
    job = rest.live_job_id()
    vertex = next(iter(rest.resource_requirements(job)))
    with pytest.raises(ReactiveModeRefused, match="reactive mode"):
        VertexRescaler(rest).request({vertex: 2})
