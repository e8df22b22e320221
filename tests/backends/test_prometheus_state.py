"""Per-operator state signals from a real Prometheus over backfilled Flink metrics, with the default queries
of config/backends.py: statefulness, hit rates from rates of the cumulative RocksDB tickers (reset on
restart, no misses, no reads, NaN), state latency, memory used and the managed memory per slot."""

from __future__ import annotations

import math
import time

import pytest

from backends.prometheus import PrometheusMetricsSource
from config.backends import PrometheusConfig
from tests.backends.backfilled import backfilled_prometheus

STEP = 5
T_END = (math.floor(time.time()) // 60) * 60 - 120
T0 = T_END - 600
RESET_AT = T_END - 30
OP = "flink_taskmanager_job_task_operator"


def _openmetrics() -> str:
    lines: list[str] = []

    def family(name: str, series: dict[str, callable]) -> None:
        lines.append(f"# TYPE {name} gauge")
        for labels, value in series.items():
            lines.extend(f"{name}{{{labels}}} {value(t)} {t}" for t in range(T0, T_END + 1, STEP))

    since = lambda t: t - T0  # noqa: E731
    after_reset = lambda t: t - RESET_AT if t >= RESET_AT else t - T0  # noqa: E731
    family(
        f"{OP}_numRecordsIn",
        {
            f'operator_name="{name}",tm_id="a"': since
            for name in ("Source:_gen", "map", "lookup", "store", "warm", "restarted", "broken", "heap")
        },
    )
    family(
        f"{OP}_rocksdb_block_cache_hit",
        {
            'operator_name="lookup",tm_id="a"': lambda t: 60 * since(t),
            'operator_name="lookup",tm_id="b"': lambda t: 30 * since(t),
            'operator_name="store",tm_id="a"': lambda t: 0,
            'operator_name="warm",tm_id="a"': lambda t: 50 * since(t),
            'operator_name="restarted",tm_id="a"': lambda t: 40 * after_reset(t),
            'operator_name="broken",tm_id="a"': lambda t: "NaN",
        },
    )
    family(
        f"{OP}_rocksdb_block_cache_miss",
        {
            'operator_name="lookup",tm_id="a"': lambda t: 10 * since(t),
            'operator_name="lookup",tm_id="b"': lambda t: 0,
            'operator_name="store",tm_id="a"': lambda t: 0,
            'operator_name="warm",tm_id="a"': lambda t: 7,
            'operator_name="restarted",tm_id="a"': lambda t: 10 * after_reset(t),
            'operator_name="broken",tm_id="a"': lambda t: 3 * since(t),
        },
    )
    family(
        f"{OP}_state_name_valueStateGetLatency",
        {
            'operator_name="lookup",state_name="seen",quantile="0.5"': lambda t: 250_000,
            'operator_name="lookup",state_name="seen",quantile="0.95"': lambda t: 9_000_000,
            'operator_name="heap",state_name="seen",quantile="0.5"': lambda t: 800,
        },
    )
    family(
        f"{OP}_state_name_valueStateUpdateLatency",
        {
            'operator_name="lookup",state_name="seen",quantile="0.5"': lambda t: 50_000,
        },
    )
    family(
        f"{OP}_rocksdb_block_cache_usage",
        {
            'operator_name="lookup",tm_id="a"': lambda t: 100 * 1048576,
            'operator_name="lookup",tm_id="b"': lambda t: 100 * 1048576,
        },
    )
    family("flink_taskmanager_Status_Flink_Memory_Managed_Total", {
        'tm_id="a"': lambda t: 316 * 1048576, 'tm_id="b"': lambda t: 316 * 1048576,
    })  # fmt: skip
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """A real Prometheus whose TSDB holds the backfilled series (it scrapes nothing)."""
    yield from backfilled_prometheus(tmp_path_factory.mktemp("prometheus-state"), _openmetrics())


def _operators(url: str, **queries) -> dict:
    config = PrometheusConfig(url=url, step_s=STEP, timeout_s=2.0, **queries)
    observation = PrometheusMetricsSource(config).observe(T_END, 60)
    return observation, {o.name: o for o in observation.operators}


def test_operators_without_state_metrics_are_stateless(prometheus):
    _, operators = _operators(prometheus.url)
    assert set(operators) == {"Source:_gen", "map", "lookup", "store", "warm", "restarted", "broken", "heap"}
    assert {name for name, o in operators.items() if not o.stateful} == {"Source:_gen", "map"}
    assert math.isnan(operators["map"].cache_hit_rate) and math.isnan(operators["map"].state_latency_ns)


def test_hit_rate_comes_from_the_ticker_rates_summed_over_subtasks(prometheus):
    _, operators = _operators(prometheus.url)
    lookup = operators["lookup"]
    assert lookup.cache_hit_rate == pytest.approx(0.9, abs=1e-6)  # (60 + 30) / (60 + 30 + 10)
    assert lookup.state_reads_rps == pytest.approx(100.0, rel=0.02)
    assert lookup.managed_memory_used_mb == pytest.approx(200.0)


def test_hit_rate_edge_cases_no_misses_no_reads_a_reset_and_nan(prometheus):
    _, operators = _operators(prometheus.url)
    assert operators["warm"].cache_hit_rate == 1.0  # misses stayed put: 100%, not 0
    assert math.isnan(operators["store"].cache_hit_rate)  # no reads at all
    assert operators["store"].state_reads_rps == 0.0
    assert operators["restarted"].cache_hit_rate == pytest.approx(0.8, abs=1e-6)  # counters restarted
    assert math.isnan(operators["broken"].cache_hit_rate)


def test_state_latency_is_the_median_over_the_operators_states_and_a_latency_makes_it_stateful(prometheus):
    _, operators = _operators(prometheus.url)
    assert operators["lookup"].state_latency_ns == pytest.approx(150_000.0)  # (250 µs + 50 µs) / 2
    heap = operators["heap"]
    assert heap.stateful and heap.state_latency_ns == 800.0 and math.isnan(heap.cache_hit_rate)


def test_managed_memory_per_slot_is_read_in_mb(prometheus):
    observation, _ = _operators(prometheus.url)
    assert observation.managed_memory_mb == pytest.approx(316.0)


DISABLED = {
    "query_operators": "",
    "query_state_operators": "",
    "query_state_cache_hits": "",
    "query_state_cache_misses": "",
    "query_state_latency_ns": "",
    "query_state_memory_used_mb": "",
    "query_managed_memory_mb": "",
}


def test_broken_or_disabled_memory_queries_never_hold_the_loop(prometheus):
    # only the CPU-side queries' problems (this Prometheus holds no CPU metrics) make the loop hold
    without, _ = _operators(prometheus.url, **DISABLED)
    assert (without.operators, without.managed_memory_mb) == ((), None)
    assert all("state" not in p and "memory" not in p for p in without.problems)
    broken = {"query_state_cache_hits": "sum(", "query_managed_memory_mb": "nonsense{"}
    observation, operators = _operators(prometheus.url, **broken)
    assert observation.problems == without.problems
    assert observation.managed_memory_mb is None
    assert math.isnan(operators["lookup"].cache_hit_rate)  # no hits, no hit rate: but still stateful
    assert operators["lookup"].stateful
