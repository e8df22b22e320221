"""The per-vertex view of the Prometheus source: the job graph from Flink's REST API and each live subtask's
task metrics from a real Prometheus over backfilled Flink series, read with the default queries of
config/backends.py.

Flink's REST answers are the ones a real Flink 2.3 cluster gave for the load job's chain topology
(`data/flink-2.3-chain-job.json`), served by a stand-in HTTP server: a real cluster cannot be made to hold
these exact vertex ids or to answer garbage (the e2e suite reads a real one). Stale subtasks after a
rescale, a subtask that moved between TaskManagers, missing metrics and a REST API that is down or lies
must leave the loop's data as it was: no problem, and either a clean per-vertex view or none at all.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest
import structlog

from backends.factory import job_graph_rest
from backends.flinkrest import FlinkRest, GraphUnavailable
from backends.prometheus import PrometheusMetricsSource
from config.backends import PrometheusConfig
from config.load import parse_config
from tests.backends.backfilled import backfilled_prometheus
from tests.backends.fake_http import FakeServer

STEP = 5
T_END = (math.floor(time.time()) // 60) * 60 - 120
T0 = T_END - 600
MOVED_AT = T_END - 30
"""store's subtask 1 runs on tm-x until here, then on tm-b (a restart placed it elsewhere)."""

RECORDED = json.loads((Path(__file__).parent / "data" / "flink-2.3-chain-job.json").read_text())
JOB_ID = RECORDED["/jobs/overview"]["jobs"][0]["jid"]
DETAIL = RECORDED[f"/jobs/{JOB_ID}"]
IDS = {v["name"]: v["id"] for v in DETAIL["vertices"]}
SOURCE, PARSE, BURN, STORE = IDS["Source: trace"], IDS["parse"], IDS["burn"], IDS["store: Writer"]
GONE_VERTEX = "0123456789abcdef0123456789abcdef"
TASK = "flink_taskmanager_job_task"

# (vertex, subtask, tm, busy, backpressured, records/s in, records/s out, from, until)
SUBTASKS = [
    (SOURCE, 0, "tm-a", "NaN", 200, 0, 400, T0, T_END),
    (PARSE, 0, "tm-a", 100, 600, 200, 200, T0, T_END),
    (PARSE, 1, "tm-b", 120, 580, 200, 200, T0, T_END),
    (BURN, 0, "tm-a", 990, 0, 210, 210, T0, T_END),
    (BURN, 1, "tm-b", 970, 10, 190, 190, T0, T_END),
    (BURN, 2, "tm-c", 5, 0, 900, 900, T0, T_END - 45),  # removed by a rescale 8 → 2 three scrapes ago
    (GONE_VERTEX, 0, "tm-a", 999, 0, 5000, 5000, T0, T_END),  # a vertex of an earlier job graph
    (STORE, 0, "tm-a", 300, 0, 210, 0, T0, T_END),
    (STORE, 1, "tm-x", 250, 0, 180, 0, T0, MOVED_AT - STEP),
    (STORE, 1, "tm-b", 400, 0, 190, 0, MOVED_AT, T_END),
]


def _openmetrics() -> str:
    families: dict[str, list[str]] = {}
    for vertex, index, tm, busy, backpressured, rate_in, rate_out, start, end in SUBTASKS:
        labels = (
            f'job_id="{JOB_ID}",task_id="{vertex}",task_name="v",subtask_index="{index}",tm_id="{tm}",'
            f'task_attempt_num="{0 if tm != "tm-b" or vertex != STORE else 1}"'
        )
        idle = 1000 - (busy if busy != "NaN" else 0) - backpressured - (800 if busy == "NaN" else 0)
        for t in range(start, end + 1, STEP):
            for name, value in (
                ("busyTimeMsPerSecond", busy),
                ("backPressuredTimeMsPerSecond", backpressured),
                ("idleTimeMsPerSecond", idle),
                ("numRecordsIn", rate_in * (t - start)),
                ("numRecordsOut", rate_out * (t - start)),
            ):
                families.setdefault(f"{TASK}_{name}", []).append(f"{TASK}_{name}{{{labels}}} {value} {t}")
    lines = []
    for name, samples in families.items():
        lines += [f"# TYPE {name} gauge", *samples]
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    yield from backfilled_prometheus(tmp_path_factory.mktemp("prometheus"), _openmetrics())


def _flink_rest(answers: dict[str, object]) -> FakeServer:
    def reply(handler) -> tuple[int, bytes]:
        path = handler.path.split("?")[0]
        return (200, json.dumps(answers[path]).encode()) if path in answers else (404, b"{}")

    return FakeServer(reply)


@pytest.fixture(scope="module")
def flink_rest():
    server = _flink_rest(RECORDED)
    yield server
    server.close()


def _source(prometheus_url: str, rest_url: str | None, **overrides: object) -> PrometheusMetricsSource:
    config = PrometheusConfig(url=prometheus_url, step_s=STEP, timeout_s=2.0, retries=0, **overrides)
    return PrometheusMetricsSource(config, rest=FlinkRest(rest_url, timeout_s=2.0) if rest_url else None)


def _by_subtask(observation) -> dict[tuple[str, int], object]:
    return {(s.vertex_id, s.subtask_index): s for s in observation.subtasks}


def test_the_graph_and_every_live_subtask_arrive_on_the_loop_grid(prometheus, flink_rest):
    observation = _source(prometheus.url, flink_rest.url).observe(T_END, 60)
    graph = observation.job_graph
    assert [(v.name, v.parallelism, v.max_parallelism) for v in graph.vertices] == [
        ("Source: trace", 1, 1),
        ("parse", 2, 128),
        ("burn", 2, 128),
        ("store: Writer", 2, 128),
    ]
    assert [(e.source_id, e.target_id, e.ship_strategy) for e in graph.edges] == [
        (SOURCE, PARSE, "REBALANCE"),
        (PARSE, BURN, "HASH"),
        (BURN, STORE, "FORWARD"),
    ]
    assert [v.name for v in graph.vertices if graph.keyed(v.vertex_id)] == ["burn"]
    subtasks = _by_subtask(observation)
    assert list(subtasks) == [
        (SOURCE, 0),
        (PARSE, 0),
        (PARSE, 1),
        (BURN, 0),
        (BURN, 1),
        (STORE, 0),
        (STORE, 1),
    ]
    grid = np.arange(T_END - 55, T_END + 1, STEP, dtype=float)
    burn = subtasks[(BURN, 0)]
    np.testing.assert_array_equal(burn.timestamps_s, grid)
    assert burn.taskmanager_id == "tm-a" and subtasks[(BURN, 1)].taskmanager_id == "tm-b"
    np.testing.assert_allclose(burn.records_in_rps, 210, rtol=1e-6)
    np.testing.assert_allclose(burn.records_out_rps, 210, rtol=1e-6)
    np.testing.assert_allclose(burn.busy_ms_per_s, 990)
    for subtask in subtasks.values():
        if subtask.vertex_id != SOURCE:
            total = subtask.busy_ms_per_s + subtask.backpressured_ms_per_s + subtask.idle_ms_per_s
            np.testing.assert_allclose(total, 1000)
    source = subtasks[(SOURCE, 0)]
    assert np.isnan(source.busy_ms_per_s).all()  # a legacy source reports no busy time
    np.testing.assert_allclose(source.records_out_rps, 400, rtol=1e-6)
    np.testing.assert_allclose(source.backpressured_ms_per_s, 200)


def test_the_per_vertex_view_adds_no_problem(prometheus, flink_rest):
    with_view = _source(prometheus.url, flink_rest.url).observe(T_END, 60)
    without = _source(prometheus.url, None).observe(T_END, 60)
    assert with_view.problems == without.problems
    assert without.job_graph is None and without.subtasks == ()


def test_subtasks_a_rescale_removed_are_dropped_not_averaged_in(prometheus, flink_rest):
    observation = _source(prometheus.url, flink_rest.url).observe(T_END, 60)
    assert {s.vertex_id for s in observation.subtasks} == {SOURCE, PARSE, BURN, STORE}
    burn = [s for s in observation.subtasks if s.vertex_id == BURN]
    assert [s.subtask_index for s in burn] == [0, 1]
    # the stale subtask 2 (busy 5, 900 records/s) is still in Prometheus's 1-minute window: not in here
    assert [float(np.nanmax(s.records_in_rps)) for s in burn] == pytest.approx([210, 190], rel=1e-6)
    assert [float(np.nanmin(s.busy_ms_per_s)) for s in burn] == [990, 970]


def test_a_subtask_that_moved_keeps_its_new_taskmanager_and_its_history(prometheus, flink_rest):
    store = _by_subtask(_source(prometheus.url, flink_rest.url).observe(T_END, 60))[(STORE, 1)]
    assert store.taskmanager_id == "tm-b"
    before, after = store.timestamps_s < MOVED_AT, store.timestamps_s >= MOVED_AT
    np.testing.assert_allclose(store.busy_ms_per_s[before], 250)  # on tm-x, before the move
    np.testing.assert_allclose(store.busy_ms_per_s[after], 400)  # tm-x's 1-minute average lingers: ignored


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"query_subtask_busy_ms": "absent_metric"}, "vertex 'Source: trace': no busy_ms_per_s series"),
        (
            {
                name: f'max by (task_id, subtask_index, tm_id) ({TASK}_{metric}{{task_id!="{STORE}"}})'
                for name, metric in (
                    ("query_subtask_busy_ms", "busyTimeMsPerSecond"),
                    ("query_subtask_backpressured_ms", "backPressuredTimeMsPerSecond"),
                    ("query_subtask_idle_ms", "idleTimeMsPerSecond"),
                    ("query_subtask_records_in_rps", "numRecordsIn"),
                    ("query_subtask_records_out_rps", "numRecordsOut"),
                )
            },
            "vertex 'store: Writer': no records_in_rps, records_out_rps, busy_ms_per_s, "
            "backpressured_ms_per_s, idle_ms_per_s series",
        ),
        (
            {"query_subtask_idle_ms": "sum(flink_taskmanager_job_task_idleTimeMsPerSecond)"},
            "no 'task_id' label",
        ),
        ({"query_subtask_busy_ms": ""}, "not configured"),
    ],
)
def test_missing_per_vertex_metrics_leave_no_view_and_a_log_line_never_a_problem(
    prometheus, flink_rest, overrides, reason
):
    source = _source(prometheus.url, flink_rest.url, **overrides)
    with structlog.testing.capture_logs() as logs:
        first = source.observe(T_END, 60)
        second = source.observe(T_END, 60)
    assert first.job_graph is None and first.subtasks == () and second.subtasks == ()
    assert first.problems == _source(prometheus.url, None).observe(T_END, 60).problems
    missing = [entry for entry in logs if entry["event"] == "per-vertex-metrics-missing"]
    assert len(missing) == 1, logs  # once, not every loop
    assert reason in missing[0]["reason"] and missing[0]["fallback"] == "job-level model"


def test_a_flink_rest_api_that_is_down_leaves_no_view_and_says_so_then_recovers(prometheus):
    with __import__("socket").socket() as probe:
        probe.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{probe.getsockname()[1]}"  # bound, never listening: refused
        source = _source(prometheus.url, down)
        with structlog.testing.capture_logs() as logs:
            observation = source.observe(T_END, 60)
    assert observation.job_graph is None and observation.subtasks == ()
    assert observation.problems == _source(prometheus.url, None).observe(T_END, 60).problems
    missing = [entry for entry in logs if entry["event"] == "per-vertex-metrics-missing"]
    assert len(missing) == 1  # one refused connection, said once
    assert "Flink REST API" in missing[0]["reason"] and "ConnectionError" in missing[0]["reason"]
    server = _flink_rest(RECORDED)
    try:
        source.rest = FlinkRest(server.url)
        with structlog.testing.capture_logs() as logs:
            assert source.observe(T_END, 60).job_graph is not None
    finally:
        server.close()
    assert [entry["event"] for entry in logs] == ["per-vertex-metrics-back"]


def _with_detail(**changes: object) -> dict[str, object]:
    detail = json.loads(json.dumps(DETAIL)) | changes
    return RECORDED | {f"/jobs/{JOB_ID}": detail}


def _reversed_plan() -> dict[str, object]:
    detail = json.loads(json.dumps(DETAIL))
    detail["vertices"].reverse()
    detail["plan"]["nodes"].reverse()
    return RECORDED | {f"/jobs/{JOB_ID}": detail}


def test_the_graph_is_put_in_topological_order_whatever_order_the_api_lists_it_in():
    server = _flink_rest(_reversed_plan())
    try:
        graph = FlinkRest(server.url).job_graph()
    finally:
        server.close()
    assert [v.name for v in graph.vertices] == ["Source: trace", "parse", "burn", "store: Writer"]


def _vertex(parallelism: object, max_parallelism: object) -> dict[str, object]:
    return {"id": "v", "name": "v", "parallelism": parallelism, "maxParallelism": max_parallelism}


def _cyclic() -> dict[str, object]:
    detail = json.loads(json.dumps(DETAIL))
    detail["plan"]["nodes"][0]["inputs"] = [{"id": STORE, "ship_strategy": "FORWARD"}]
    return RECORDED | {f"/jobs/{JOB_ID}": detail}


@pytest.mark.parametrize(
    ("answers", "reason"),
    [
        (_with_detail(vertices="nope"), "unexpected answer"),
        (_with_detail(vertices=[{"id": "x", "name": "x"}]), "unexpected answer"),
        (
            _with_detail(plan={"nodes": [{"id": PARSE, "inputs": [{"id": "zz"}]}]}),
            "vertices the job does not have",
        ),
        (_cyclic(), "cycle"),
        # counts the per-vertex model sizes its arrays by: 10^8 key groups took gigabytes, 2.7 read as 2
        (_with_detail(vertices=[_vertex(2, 100_000_000)]), "maxParallelism 100000000 outside"),
        (_with_detail(vertices=[_vertex(200, 128)]), "parallelism 200 / maxParallelism 128 outside"),
        (_with_detail(vertices=[_vertex(0, 128)]), "parallelism 0 / maxParallelism 128 outside"),
        (_with_detail(vertices=[_vertex(2.7, 128)]), "parallelism 2.7 is not a whole number"),
        (_with_detail(vertices=[_vertex(True, 128)]), "parallelism True is not a whole number"),
        ({"/jobs/overview": {"jobs": []}}, "no running job"),
        ({"/jobs/overview": {"jobs": [{"jid": JOB_ID, "state": "FINISHED"}]}}, "no running job"),
        ({"/jobs/overview": "<html>login</html>"}, "unexpected answer"),
        ({}, "HTTPError"),
    ],
)
def test_a_lying_flink_rest_api_gives_a_reason_not_a_graph(answers, reason):
    server = _flink_rest(answers)
    try:
        with pytest.raises(GraphUnavailable, match=reason):
            FlinkRest(server.url).job_graph()
    finally:
        server.close()


@pytest.mark.parametrize("parallelism", [2.7, 0, True, "3", 10**9])
def test_a_lying_parallelism_leaves_the_job_status_unknown(parallelism):
    """2.7 read as 2, so a rescale to 2 passed for done on a lying answer."""
    server = _flink_rest(_with_detail(vertices=[_vertex(parallelism, 128)]))
    try:
        assert FlinkRest(server.url).job_status() is None
    finally:
        server.close()


def test_a_long_graph_is_ordered_with_ties_in_the_apis_order():
    """Two chains listed interleaved and backwards: each runs forward, and of the vertices ready at once
    the one the API lists first comes first (the search was cubic: 16 s for a chain of 2,000)."""
    ids = [f"v{i:04d}" for i in range(2000)]
    listed = ids[::-1]
    detail = {
        "vertices": [{"id": v, "name": v, "parallelism": 1, "maxParallelism": 128} for v in listed],
        "plan": {
            "nodes": [
                {"id": v, "inputs": [{"id": ids[i - 2], "ship_strategy": "FORWARD"}] if i >= 2 else []}
                for v, i in ((v, ids.index(v)) for v in listed)
            ]
        },
    }
    server = _flink_rest(RECORDED | {f"/jobs/{JOB_ID}": detail})
    try:
        graph = FlinkRest(server.url).job_graph()
    finally:
        server.close()
    assert [v.vertex_id for v in graph.vertices][:3] == ["v0001", "v0003", "v0005"]  # v0000 waits
    position = {v.vertex_id: i for i, v in enumerate(graph.vertices)}
    assert all(position[e.source_id] < position[e.target_id] for e in graph.edges)


@pytest.mark.parametrize(
    ("settings", "url"),
    [
        (
            {"target": {"kind": "prometheus+local-flink"}, "local_flink": {"rest_url": "http://jm:8081"}},
            "http://jm:8081",
        ),
        ({"target": {"kind": "prometheus+kubernetes"}}, "http://127.0.0.1:8081"),
        (
            {"target": {"kind": "prometheus+kubernetes"}, "prometheus": {"flink_rest_url": "http://rest:80"}},
            "http://rest:80",
        ),
        ({"target": {"kind": "prometheus+local-flink"}, "prometheus": {"flink_rest_url": ""}}, None),
    ],
)
def test_the_job_graph_is_read_from_the_configured_flink_rest_api(settings, url):
    rest = job_graph_rest(parse_config(settings))
    assert (rest.url if rest else None) == url
