"""Prometheus answering nonsense, per query: the loop holds (never scales, never learns) and names why.

A real Prometheus serves backfilled series for everything a real one can answer (NaN, negative rates,
CPU in percent, throughput above input, a parallelism the workers contradict, stale data); a proxy in
front of it breaks one query at a time with what no real Prometheus answers (garbage, a hang).
"""

from __future__ import annotations

import json
import math
import time
import urllib.request
from urllib.parse import parse_qs, urlparse

import pytest

from backends.prometheus import PrometheusMetricsSource
from config.backends import PrometheusConfig
from config.schema import Config
from daemon.build import knowledge_settings, make_loop
from mape.knowledge_store import KnowledgeStore
from tests.backends.backfilled import backfilled_prometheus
from tests.backends.fake_http import FakeServer

STEP = 5
T_END = (math.floor(time.time()) // 60) * 60 - 120
T0 = T_END - 900
WORKERS = ("tm-a", "tm-b", "tm-c")


def _openmetrics() -> str:
    lines: list[str] = []

    def series(name: str, kind: str, samples: dict[str, object], until: int = T_END, ends=None) -> None:
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples.items():
            for t in range(T0, (ends or {}).get(labels, until) + 1, STEP):
                lines.append(f"{name}{labels} {value(t) if callable(value) else value} {t}")

    each = lambda value: {f'{{tm_id="{w}"}}': value for w in WORKERS}  # noqa: E731
    series("f_cpu", "gauge", each(0.5))
    series("f_cpu_percent", "gauge", each(50))
    series("f_tput", "gauge", each(300))
    series("f_tput_high", "gauge", each(5_000))
    series("f_input", "gauge", {"": 1_000})
    series("f_input_nan", "gauge", {"": "NaN"})
    # stops 400 s before the end: Prometheus repeats a series' last sample for 5 minutes (lookback), so
    # the newest samples the loop sees are 40 s old at its first iteration and gone at its second
    series("f_input_stale", "gauge", {"": 1_000}, until=T_END - 400)
    # tm-c stopped reporting 200 s before the end, tm-a and tm-b go on: its copies look fresh for 5 minutes
    ends = {'{tm_id="tm-c"}': T_END - 200}
    series("f_cpu_c_stops", "gauge", each(0.5), ends=ends)
    series("f_tput_c_stops", "gauge", each(300), ends=ends)
    series("f_backlog", "gauge", {"": 0})
    series("f_parallelism", "gauge", {"": 3})
    series("f_parallelism_5", "gauge", {"": 5})
    series("f_uptime_ms", "gauge", {"": lambda t: (t - T0 + 3_600) * 1_000})
    series("f_restarts", "gauge", {"": 0})
    # Flink's source counter and a backlog that shrinks fast: the old default input query went negative
    series("flink_taskmanager_job_task_operator_numRecordsOut", "counter",
           {'{operator_name="Source: kafka"}': lambda t: 100 * (t - T0)})  # fmt: skip
    series("flink_taskmanager_job_task_operator_pendingRecords", "gauge",
           {"": lambda t: max(0, 9_000_000 - 10_000 * (t - T0))})  # fmt: skip
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    yield from backfilled_prometheus(tmp_path_factory.mktemp("prometheus"), _openmetrics())


GOOD = {
    "query_worker_cpu": "f_cpu",
    "query_worker_throughput": "f_tput",
    "query_input_rate": "f_input",
    "query_backlog": "f_backlog",
    "query_parallelism": "f_parallelism",
    "query_uptime": "f_uptime_ms / 1000",
    "query_restarts": "f_restarts",
    "query_freshness": "time() - max(timestamp(f_uptime_ms))",
    "query_worker_freshness": "time() - max by (tm_id) (timestamp(f_cpu))",
}


def _config(url: str, **queries: object) -> PrometheusConfig:
    options = {"stale_after_s": 1e9, **GOOD, **queries}
    return PrometheusConfig(url=url, step_s=STEP, timeout_s=1.0, retries=0, **options)


class _Target:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def scale_to(self, scaleout: int, now_s: float) -> None:
        self.calls.append(scaleout)


def _iterate(prometheus_config: PrometheusConfig) -> tuple[list, list[int]]:
    config = Config()
    store = KnowledgeStore(":memory:")
    knowledge = store.load(knowledge_settings(config))
    knowledge.last_target_scaleout = 3
    target = _Target()
    loop = make_loop(config, PrometheusMetricsSource(prometheus_config), target, knowledge, store)
    try:
        results = [loop.iterate(T_END - 60), loop.iterate(T_END)]
    finally:
        knowledge.close()
    return results, target.calls


def _outcome(results: list, calls: list[int]) -> str:
    if calls or any(r.decision.target_scaleout != r.decision.current_scaleout for r in results):
        return "scaled-on-bad-data"
    if any(r.errors for r in results):
        return "crashed"
    return "held" if all(r.decision.rule == "hold-bad-data" for r in results) else "scaled-on-bad-data"


def test_good_data_raises_no_alarm(prometheus):
    results, _ = _iterate(_config(prometheus.url))
    assert all(not r.errors for r in results)
    assert not [p for r in results for p in r.assessment.problems if p.startswith("implausible")]


WRONG = {
    "nan-input": ({"query_input_rate": "f_input_nan"}, ("no input-rate samples",)),
    "negative-input": ({"query_input_rate": "f_input - 1300"}, ("implausible[negative-rate]",)),
    "cpu-in-percent": ({"query_worker_cpu": "f_cpu_percent"}, ("implausible[cpu-out-of-range]",)),
    "parallelism-vs-workers": (
        {"query_parallelism": "f_parallelism_5"},
        ("implausible[parallelism-mismatch]",),
    ),
    "stale-input": ({"query_input_rate": "f_input_stale"}, ("implausible[stale-samples]", "no input-rate")),
    "one-worker-stale": (
        {
            "query_worker_cpu": "f_cpu_c_stops",
            "query_worker_throughput": "f_tput_c_stops",
            "query_worker_freshness": "time() - max by (tm_id) (timestamp(f_cpu_c_stops))",
            "stale_after_s": 30.0,
        },
        ("implausible[stale-samples]: worker tm-c",),
    ),
    "throughput-fifteenfold": (  # two windows: too short a span to verify, held as unverified
        {"query_worker_throughput": "f_tput_high"},
        ("implausible[throughput-unverified]",),
    ),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_implausible_answers_of_a_real_prometheus_hold_the_loop(prometheus, case, fault):
    queries, named = WRONG[case]
    results, calls = _iterate(_config(prometheus.url, **queries))
    fault("prometheus", _outcome(results, calls), case)
    assert _outcome(results, calls) == "held"
    assert all(any(n in p for n in named for p in r.decision.reasons) for r in results), [
        r.decision.reasons for r in results
    ]


def test_the_default_input_query_never_goes_negative(prometheus):
    default = PrometheusConfig().query_input_rate
    unclamped = default.removeprefix("clamp_min(").removesuffix(", 0)")
    assert float(prometheus.query(unclamped, T_END - 300)[0]["value"][1]) < 0  # the fault is real
    assert float(prometheus.query(default, T_END - 300)[0]["value"][1]) == 0.0


def _proxy(prometheus_url: str, broken: str, how: str) -> FakeServer:
    """Forwards to the real Prometheus, except the one query it breaks: garbage, no answer in time, or the
    real answer with a sample time too large for a float."""

    def reply(handler) -> tuple[int, bytes]:
        query = parse_qs(urlparse(handler.path).query).get("query", [""])[0]
        if query == broken:
            if how == "slow":
                server.release.wait(30)
                return 200, b"{}"
            if how == "garbage":
                return 200, b'{"status":"success","data":{"resultType":"matrix","result":[{"values":"?"}]}}'
        with urllib.request.urlopen(prometheus_url + handler.path, timeout=5) as answer:
            status, body = answer.status, answer.read()
        if query == broken and how == "overflowing":  # a time of 400 digits: float() overflowed, uncaught
            data = json.loads(body)
            for series in data["data"]["result"]:
                (series["values"] if "values" in series else [series["value"]])[0][0] = 10**400
            body = json.dumps(data).encode()
        return status, body

    server = FakeServer(reply)
    return server


@pytest.mark.parametrize("how", ["garbage", "slow", "overflowing"])
@pytest.mark.parametrize("query", sorted(GOOD))
def test_one_broken_query_holds_the_loop(prometheus, query, how, fault):
    server = _proxy(prometheus.url, GOOD[query], how)
    try:
        results, calls = _iterate(_config(server.url))
    finally:
        server.close()
    fault("prometheus", _outcome(results, calls), f"{query} {how}")
    assert calls == [] and all(not r.errors for r in results)
    assert {r.decision.rule for r in results} == {"hold-bad-data"}
