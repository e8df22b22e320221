"""The Prometheus source: a real Prometheus server over data backfilled with promtool (exact values,
gaps and stale data at known times), and a misbehaving stand-in for garbage, errors, slowness and auth."""

from __future__ import annotations

import base64
import json
import math
import time
from pathlib import Path

import numpy as np
import pytest
import structlog.testing

from backends.prometheus import PrometheusMetricsSource
from config.backends import PrometheusConfig
from config.schema import Config
from daemon.build import knowledge_settings, make_loop
from mape import plausibility
from mape.knowledge_store import KnowledgeStore
from tests.backends.backfilled import backfilled_prometheus
from tests.backends.fake_http import FakeServer, raw_server, self_signed_cert, within

STEP = 5
T_END = (math.floor(time.time()) // 60) * 60 - 120  # two minutes ago, a multiple of the step
T0 = T_END - 600
NAN_AT = T_END - 20
STOPPED_AT = T_END - 200


def _openmetrics() -> str:
    lines = []

    def gauge(name: str, samples: dict[str, callable], until: dict[str, int] | None = None) -> None:
        lines.append(f"# TYPE {name} gauge")
        for labels, value in samples.items():
            for t in range(T0, (until or {}).get(labels, T_END) + 1, STEP):
                lines.append(f"{name}{labels} {value(t)} {t}")

    i = lambda t: (t - T0) // STEP  # noqa: E731
    gauge("test_cpu", {'{tm_id="tm-a"}': lambda t: 0.5 + 0.001 * i(t),
                       '{tm_id="tm-b"}': lambda t: "NaN" if t == NAN_AT else 0.25})  # fmt: skip
    gauge("test_tput", {'{tm_id="tm-a"}': lambda t: 100 + i(t), '{tm_id="tm-b"}': lambda t: 40})
    gauge("test_input", {"": lambda t: 1000 + 10 * i(t)})
    gauge("test_allnan", {"": lambda t: "NaN"})
    gauge("test_backlog", {"": lambda t: 500})
    gauge("test_parallelism", {"": lambda t: 2})
    gauge("test_uptime_ms", {"": lambda t: (t - T0) * 1000})
    gauge("test_restarts", {"": lambda t: 3})
    gauge("test_dup", {'{x="1"}': lambda t: 1, '{x="2"}': lambda t: 2})
    gauge("test_negative", {"": lambda t: -5})
    gauge("test_half", {'{tm_id="tm-a"}': lambda t: 7})
    gauge("test_lag", {'{operator="a"}': lambda t: 200, '{operator="b"}': lambda t: 150 + 10 * i(t)})
    # tm-b stopped reporting 200 s before the end (no staleness marker: Prometheus carries it forward)
    stops = {'{tm_id="tm-b"}': STOPPED_AT}
    gauge("test_cpu_stops", {'{tm_id="tm-a"}': lambda t: 0.5, '{tm_id="tm-b"}': lambda t: 0.25}, stops)
    gauge("test_tput_stops", {'{tm_id="tm-a"}': lambda t: 100, '{tm_id="tm-b"}': lambda t: 40}, stops)
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """A real Prometheus whose TSDB holds the backfilled series (it scrapes nothing)."""
    yield from backfilled_prometheus(tmp_path_factory.mktemp("prometheus"), _openmetrics())


def _config(url: str, **overrides: object) -> PrometheusConfig:
    queries = {
        "query_worker_cpu": "test_cpu",
        "query_worker_throughput": "test_tput",
        "query_input_rate": "test_input",
        "query_backlog": "test_backlog",
        "query_parallelism": "test_parallelism",
        "query_uptime": "test_uptime_ms / 1000",
        "query_restarts": "test_restarts",
        "query_freshness": "time() - max(timestamp(test_uptime_ms))",
        "query_worker_freshness": "time() - max by (tm_id) (timestamp(test_cpu))",
    }
    return PrometheusConfig(**{"url": url, "step_s": STEP, "timeout_s": 2.0, **queries, **overrides})


def test_every_signal_is_read_onto_the_window_grid(prometheus):
    observation = PrometheusMetricsSource(_config(prometheus.url)).observe(T_END, 60)
    grid = np.arange(T_END - 55, T_END + 1, STEP, dtype=float)
    assert observation.problems == ()
    np.testing.assert_array_equal(observation.input_timestamps_s, grid)
    np.testing.assert_allclose(observation.input_rate_rps, 1000 + 10 * (grid - T0) / STEP)
    a, b = observation.workers
    assert (a.worker_id, b.worker_id) == ("tm-a", "tm-b")
    np.testing.assert_allclose(a.cpu, 0.5 + 0.001 * (grid - T0) / STEP)
    np.testing.assert_allclose(a.throughput_rps, 100 + (grid - T0) / STEP)
    assert (observation.backlog_records, observation.parallelism, observation.restarts) == (500, 2, 3)
    assert observation.uptime_s == pytest.approx(600)


def test_a_step_of_a_fraction_of_a_second_is_a_valid_range_query(prometheus):
    observation = PrometheusMetricsSource(_config(prometheus.url, step_s=2.5)).observe(T_END, 60)
    assert observation.problems == ()
    assert len(observation.input_timestamps_s) == 24 and np.isfinite(observation.input_rate_rps).all()


def test_the_latency_is_the_slowest_series_on_the_grid_and_optional(prometheus):
    # the default query (the sources' event-time lag) finds nothing here: no latency, and no problem
    assert PrometheusMetricsSource(_config(prometheus.url)).observe(T_END, 60).latency_ms is None
    observation = PrometheusMetricsSource(_config(prometheus.url, query_latency_ms="test_lag")).observe(
        T_END, 60
    )
    grid = np.arange(T_END - 55, T_END + 1, STEP, dtype=float)
    assert observation.problems == ()
    np.testing.assert_allclose(observation.latency_ms, np.maximum(200, 150 + 10 * (grid - T0) / STEP))
    # negative, all NaN, broken: not read, never a problem that would hold the loop, said once
    for query in ("test_negative", "test_allnan", "sum(test_lag"):
        source = PrometheusMetricsSource(_config(prometheus.url, query_latency_ms=query))
        with structlog.testing.capture_logs() as logs:
            observations = [source.observe(T_END, 60) for _ in range(2)]
        assert all(o.latency_ms is None and o.problems == () for o in observations)
        assert [e["event"] for e in logs if e["event"].startswith("latency")] == ["latency-not-read"]


def test_a_nan_sample_is_a_gap_in_the_series_not_a_problem(prometheus):
    observation = PrometheusMetricsSource(_config(prometheus.url)).observe(T_END, 60)
    b = observation.workers[1]
    gap = np.flatnonzero(np.isnan(b.cpu))
    assert list(b.timestamps_s[gap]) == [NAN_AT]
    assert np.isfinite(np.delete(b.cpu, gap)).all()
    assert observation.problems == ()


def test_a_window_of_nothing_but_nan_is_a_problem(prometheus):
    observation = PrometheusMetricsSource(_config(prometheus.url, query_input_rate="test_allnan")).observe(
        T_END, 60
    )
    assert observation.problems == ("input_rate: only gaps (NaN) in the window",)
    assert np.isnan(observation.input_rate_rps).all()


def test_metrics_that_stopped_arriving_are_stale(prometheus):
    # Prometheus carries the last value forward for 5 minutes, so the series alone look fresh
    observation = PrometheusMetricsSource(_config(prometheus.url)).observe(T_END + 90, 60)
    assert any(p.startswith("metrics stale: newest sample 90 s old") for p in observation.problems)


def test_a_worker_that_stopped_reporting_shows_gaps_not_carried_copies(prometheus):
    stopped = {"query_worker_cpu": "test_cpu_stops", "query_worker_throughput": "test_tput_stops"}
    ages = "time() - max by (tm_id) (timestamp(test_cpu_stops))"
    carried = PrometheusMetricsSource(_config(prometheus.url, **stopped, query_worker_freshness=""))
    observation = carried.observe(T_END, 60)
    assert np.isfinite(observation.workers[1].throughput_rps).all()  # Prometheus's copies look fresh
    assert plausibility.stale(observation) == []
    source = PrometheusMetricsSource(_config(prometheus.url, **stopped, query_worker_freshness=ages))
    observation = source.observe(T_END, 60)
    a, b = observation.workers
    assert np.isfinite(a.throughput_rps).all() and np.isfinite(a.cpu).all()
    copies = b.timestamps_s > STOPPED_AT + 30  # stale_after_s past its newest sample
    assert np.isnan(b.throughput_rps[copies]).all() and np.isnan(b.cpu[copies]).all()
    assert np.isfinite(b.throughput_rps[~copies]).all()
    assert [str(p) for p in plausibility.stale(observation)] == [
        "implausible[stale-samples]: worker tm-b has no sample in the window"
    ]
    at_first = source.observe(STOPPED_AT + 65, 60)  # the copies of its last 35 s dropped
    assert [str(p) for p in plausibility.stale(at_first)] == [
        "implausible[stale-samples]: newest sample of worker tm-b is 35 s old"
    ]


def test_a_broken_worker_freshness_query_is_named(prometheus):
    source = PrometheusMetricsSource(_config(prometheus.url, query_worker_freshness="test_cpu + "))
    observation = source.observe(T_END, 60)
    assert [p.split(":")[0] for p in observation.problems] == ["worker_freshness"]
    unlabelled = PrometheusMetricsSource(_config(prometheus.url, query_worker_freshness="test_backlog"))
    assert unlabelled.observe(T_END, 60).problems[0].startswith("worker_freshness: unexpected answer")


def test_missing_series_leave_their_fields_unknown_and_named(prometheus):
    config = _config(prometheus.url, query_backlog="absent_metric", query_input_rate="absent_metric",
                     query_parallelism="absent_metric")  # fmt: skip
    observation = PrometheusMetricsSource(config).observe(T_END, 60)
    assert set(observation.problems) == {
        "input_rate: no series",
        "backlog: no series",
        "parallelism: no series",
    }
    assert observation.backlog_records is None and observation.parallelism is None
    assert len(observation.input_rate_rps) == 12 and np.isnan(observation.input_rate_rps).all()


def test_a_worker_missing_from_one_query_is_named(prometheus):
    observation = PrometheusMetricsSource(
        _config(prometheus.url, query_worker_throughput="test_half")
    ).observe(T_END, 60)
    assert observation.problems == ("worker tm-b: no throughput series",)
    assert np.isnan(observation.workers[1].throughput_rps).all()


def test_impossible_values_are_problems_not_data(prometheus):
    config = _config(prometheus.url, query_backlog="test_dup", query_uptime="test_negative",
                     query_parallelism="test_cpu{tm_id='tm-a'}")  # fmt: skip
    observation = PrometheusMetricsSource(config).observe(T_END, 60)
    assert (
        observation.backlog_records is None
        and observation.uptime_s is None
        and observation.parallelism is None
    )
    text = " | ".join(observation.problems)
    assert "backlog: unexpected answer: expected one series, got 2" in text
    assert "uptime: negative (-5.0)" in text
    assert "parallelism: not a whole number in 1..32768 (0.62)" in text
    huge = PrometheusMetricsSource(_config(prometheus.url, query_parallelism="test_parallelism * 1e20"))
    observation = huge.observe(T_END, 60)  # kept, it was saved as the last target: a 21-digit scale-out
    assert observation.parallelism is None
    assert "parallelism: not a whole number in 1..32768 (2e+20)" in " | ".join(observation.problems)


# ---- a server that misbehaves --------------------------------------------------------------------
GARBAGE = [
    (200, b"<html>proxy login</html>"),
    (200, json.dumps({"status": "success", "data": {"result": "nope"}}).encode()),
    (
        200,
        json.dumps(
            {"status": "success", "data": {"result": [{"metric": {}, "values": [[1, "x"]]}]}}
        ).encode(),
    ),
    (200, json.dumps({"status": "success"}).encode()),
    (500, b'{"status":"error","error":"query timed out"}'),
    (503, b"overloaded"),
]


@pytest.mark.parametrize(("status", "body"), GARBAGE)
def test_garbage_or_error_answers_give_a_partial_observation_never_an_exception(status, body):
    server = FakeServer(lambda handler: (status, body))
    try:
        observation = PrometheusMetricsSource(_config(server.url, retries=0)).observe(T_END, 60)
    finally:
        server.close()
    assert len(observation.problems) >= 8  # one per query: nothing was usable
    assert (
        observation.workers == () and observation.backlog_records is None and observation.parallelism is None
    )
    assert np.isnan(observation.input_rate_rps).all()


def test_a_throttling_server_is_not_waited_for_and_asked_no_more():
    """urllib3 slept on a 429's Retry-After whole (up to 6 h, deaf to SIGTERM), once per query."""

    def throttled(handler) -> None:
        body = b'{"status":"error","errorType":"unavailable","error":"too many requests"}'
        handler.send_response(429)
        handler.send_header("Retry-After", "3600")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    with raw_server(throttled) as url:
        observation = within(30, lambda: PrometheusMetricsSource(_config(url, retries=1)).observe(T_END, 60))
    assert "429" in observation.problems[0]
    assert all("not queried (Prometheus throttles this client (429))" in p for p in observation.problems[1:8])


def test_an_input_rate_of_several_series_is_refused_not_added(prometheus):
    """A series answered twice (two HA replicas told apart by a label) doubled the input rate."""
    observation = PrometheusMetricsSource(_config(prometheus.url, query_input_rate="test_cpu")).observe(
        T_END, 60
    )
    assert any("input_rate: unexpected answer: expected one series, got 2" in p for p in observation.problems)
    assert np.isnan(observation.input_rate_rps).all()


def test_an_unreachable_server_costs_one_failed_connection_per_loop():
    with __import__("socket").socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"  # bound, never listening: refused
        observation = PrometheusMetricsSource(_config(url, retries=0)).observe(T_END, 60)
    assert "Prometheus unreachable: ConnectionError" in observation.problems[0]
    assert all("not queried" in p for p in observation.problems[1:8])


def test_a_slow_server_is_given_up_after_the_timeout_once():
    server = FakeServer(lambda handler: (server.release.wait(30), (200, b"{}"))[1])
    try:
        started = time.monotonic()
        observation = PrometheusMetricsSource(_config(server.url, timeout_s=0.5, retries=0)).observe(
            T_END, 60
        )
        elapsed = time.monotonic() - started
    finally:
        server.close()
    assert 0.5 <= elapsed < 20.0  # waited for the timeout, and not for the server's 30 s
    assert "Prometheus timed out" in observation.problems[0]
    assert all("not queried" in p for p in observation.problems[1:8])
    assert len(server.requests) == 1


def _success(handler) -> tuple[int, bytes]:
    return 200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()


def test_bearer_token_is_read_from_its_file_and_sent(tmp_path: Path):
    (tmp_path / "token").write_text("s3cret\n")
    server = FakeServer(_success)
    try:
        PrometheusMetricsSource(_config(server.url, bearer_token_file=str(tmp_path / "token"))).observe(
            T_END, 60
        )
    finally:
        server.close()
    assert {r["headers"].get("Authorization") for r in server.requests} == {"Bearer s3cret"}


def test_basic_auth_over_tls_verified_with_the_configured_ca(tmp_path: Path):
    cert, key = self_signed_cert(tmp_path)
    (tmp_path / "password").write_text("hunter2")
    server = FakeServer(_success, tls=(cert, key))
    auth = {"basic_auth_username": "foresail", "basic_auth_password_file": str(tmp_path / "password")}
    try:
        trusted = PrometheusMetricsSource(_config(server.url, tls_ca_file=str(cert), **auth)).observe(
            T_END, 60
        )
        untrusted = PrometheusMetricsSource(_config(server.url, retries=0, **auth)).observe(T_END, 60)
    finally:
        server.close()
    assert not any("unreachable" in p for p in trusted.problems)
    expected = "Basic " + base64.b64encode(b"foresail:hunter2").decode()
    assert {r["headers"].get("Authorization") for r in server.requests} == {expected}
    assert "SSLError" in untrusted.problems[0]  # an unknown CA is refused, not ignored


class _RecordingTarget:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def scale_to(self, scaleout: int, now_s: float) -> None:
        self.calls.append(scaleout)


@pytest.mark.parametrize("body", [b"garbage", None])
def test_the_loop_holds_and_never_scales_on_what_a_broken_prometheus_gives(body):
    server = FakeServer(lambda handler: (200, body)) if body else None
    url = server.url if server else "http://127.0.0.1:9"
    config = Config()
    target = _RecordingTarget()
    store = KnowledgeStore(":memory:")
    knowledge = store.load(knowledge_settings(config))
    knowledge.last_target_scaleout = 3
    loop = make_loop(config, PrometheusMetricsSource(_config(url, retries=0)), target, knowledge, store)
    try:
        results = [loop.iterate(T_END + 60 * k) for k in range(3)]
    finally:
        knowledge.close()
        if server:
            server.close()
    assert target.calls == []
    assert {r.decision.rule for r in results} == {"hold-bad-data"}
    assert {r.decision.target_scaleout for r in results} == {3}


def test_the_input_rate_alone_is_the_observations_and_a_failure_raises(prometheus):
    source = PrometheusMetricsSource(_config(prometheus.url))
    timestamps, rates = source.input_rate(T_END, 15)
    np.testing.assert_array_equal(timestamps, [T_END - 10, T_END - 5, T_END])
    np.testing.assert_allclose(rates, 1000 + 10 * (timestamps - T0) / STEP)
    server = FakeServer(lambda handler: (503, b"overloaded"))
    try:
        with pytest.raises(Exception, match="503"):  # the surge watch logs it in one line and waits
            PrometheusMetricsSource(_config(server.url, retries=0)).input_rate(T_END, 15)
    finally:
        server.close()
