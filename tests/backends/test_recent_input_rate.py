"""The surge signal on a real Prometheus: the default short-window input-rate query against the default
one-minute one, over Flink-named series backfilled with promtool (a load step at a known second, a source
saturated by it), and the fall back to the input rate where a slow scrape leaves the short window empty."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import structlog.testing

from backends.prometheus import PrometheusMetricsSource
from config.backends import PrometheusConfig
from mape.recent_load import observed_recent_rps
from tests.backends.backfilled import backfilled_prometheus

SCRAPE_S = 5
T_END = (math.floor(time.time()) // 60) * 60 - 120
T0 = T_END - 900
STEP_AT = T_END - 300
"""Arrivals step from 1,000 to 3,000 records/s here; the source carries 2,000, the rest waits (pending)."""
SLOW_SCRAPE_S = 30


def _openmetrics() -> str:
    out, pending, slow = [], [], []
    emitted = waiting = 0.0
    for t in range(T0, T_END + 1, SCRAPE_S):
        out.append(
            f'flink_taskmanager_job_task_operator_numRecordsOut{{operator_name="Source: gen"}} {emitted} {t}'
        )
        pending.append(f"flink_taskmanager_job_task_operator_pendingRecords {waiting} {t}")
        arrivals = 1000 if t < STEP_AT else 3000
        emitted += min(arrivals, 2000) * SCRAPE_S
        waiting += max(arrivals - 2000, 0) * SCRAPE_S
    for t in range(T0, T_END + 1, SLOW_SCRAPE_S):
        slow.append(f"slow_out {1000 * (t - T0)} {t}")
    return "\n".join([
        "# TYPE flink_taskmanager_job_task_operator_numRecordsOut counter", *out,
        "# TYPE flink_taskmanager_job_task_operator_pendingRecords gauge", *pending,
        "# TYPE slow_out counter", *slow, "# EOF", "",
    ])  # fmt: skip


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    yield from backfilled_prometheus(tmp_path_factory.mktemp("prometheus"), _openmetrics())


def _source(url: str, **queries: str) -> PrometheusMetricsSource:
    return PrometheusMetricsSource(PrometheusConfig(url=url, step_s=SCRAPE_S, timeout_s=2.0, **queries))


def test_the_default_short_window_shows_a_step_in_full_while_the_minute_rate_still_climbs(prometheus):
    source = _source(prometheus.url)
    now = STEP_AT + 25
    observation = source.observe(now, 60)
    minute_newest = observation.input_rate_rps[-1]
    assert 1500 < minute_newest < 2200, "over one minute the step shows less than half its height"
    recent, newest = observed_recent_rps(observation)
    assert newest == pytest.approx(3000, rel=0.03) and recent > 2500, (recent, newest)
    _, rates = source.input_rate(now, 15)  # what the surge watch reads between iterations
    assert rates[-1] == pytest.approx(3000, rel=0.03)
    np.testing.assert_allclose(rates, observation.recent_input_rate_rps[-len(rates) :])
    # before the step both say 1,000
    before = source.observe(STEP_AT - 60, 60)
    assert observed_recent_rps(before)[1] == pytest.approx(1000, rel=0.02)
    assert before.input_rate_rps[-1] == pytest.approx(1000, rel=0.02)


def test_a_scrape_too_slow_for_the_short_window_falls_back_to_the_input_rate_said_once(prometheus):
    queries = {
        "query_input_rate": "sum(rate(slow_out[2m]))",
        "query_input_rate_recent": "sum(rate(slow_out[20s]))",
    }
    source = _source(prometheus.url, **queries)
    with structlog.testing.capture_logs() as logs:
        observations = [source.observe(T_END - 10 * i, 60) for i in range(2)]
        times, rates = source.input_rate(T_END, 15)
    assert all(o.recent_input_rate_rps is None for o in observations)
    assert observed_recent_rps(observations[0])[0] == pytest.approx(1000, rel=0.01)
    assert rates == pytest.approx(np.full(len(times), 1000.0), rel=0.01)
    said = [entry for entry in logs if entry["event"] == "recent-input-rate-not-read"]
    assert len(said) == 1 and said[0]["reason"] == "no samples", logs
    # not configured: the same, without reading it
    unset = _source(prometheus.url, **{**queries, "query_input_rate_recent": ""})
    assert unset.observe(T_END, 60).recent_input_rate_rps is None
