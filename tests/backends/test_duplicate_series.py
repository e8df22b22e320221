"""The default queries count every subtask once: over a real Prometheus holding Flink-named series
backfilled with promtool, a TaskManager scraped twice (two scrape jobs, or two Prometheus replicas behind
one query API: the same series with another `job` label) and a restarted subtask's previous attempt still
in the rate window read the same input rate, per-worker throughput, backlog and parallelism as one copy."""

from __future__ import annotations

import math
import time

import numpy as np

from backends.prometheus import PrometheusMetricsSource
from config.backends import PrometheusConfig
from messages.types import Observation
from tests.backends.backfilled import backfilled_prometheus

SCRAPE_S = 5
T_END = (math.floor(time.time()) // 60) * 60 - 120
T0 = T_END - 600
RESTART_AT = T_END - 30
"""Subtask 1 restarts here (attempt 0 → 1); its previous attempt's samples stay in the 1 m windows."""
RATES_RPS = {"0": 300.0, "1": 200.0}
PENDING = {"0": 40, "1": 60}


def _subtask(index: str, attempt: int, scrape_job: str) -> str:
    return (
        f'job="{scrape_job}",job_id="j1",task_id="t-src",operator_id="op-src",operator_name="Source: gen",'
        f'task_name="Source: gen",subtask_index="{index}",task_attempt_num="{attempt}",'
        f'task_attempt_id="a{index}{attempt}",tm_id="tm-{index}"'
    )


def _openmetrics(scrape_jobs: tuple[str, ...], restart: bool) -> str:
    out, pending, records_in, cpu, uptime = [], [], [], [], []
    for scrape_job in scrape_jobs:
        for t in range(T0, T_END + 1, SCRAPE_S):
            cpu.extend(
                f'flink_taskmanager_Status_JVM_CPU_Load{{job="{scrape_job}",tm_id="tm-{i}"}} 0.5 {t}'
                for i in RATES_RPS
            )
            uptime.append(
                f'flink_jobmanager_job_uptime{{job="{scrape_job}",job_id="j1"}} {(t - T0) * 1000} {t}'
            )
        for index, rate in RATES_RPS.items():
            attempts = [(0, T0, T_END)]
            if restart and index == "1":
                attempts = [(0, T0, RESTART_AT), (1, RESTART_AT + SCRAPE_S, T_END)]
            for attempt, start, end in attempts:
                labels = _subtask(index, attempt, scrape_job)
                for t in range(start, end + 1, SCRAPE_S):
                    out.append(
                        f"flink_taskmanager_job_task_operator_numRecordsOut{{{labels}}} {rate * (t - start)} {t}"
                    )
                    pending.append(
                        f"flink_taskmanager_job_task_operator_pendingRecords{{{labels}}} {PENDING[index]} {t}"
                    )
                    records_in.append(
                        f"flink_taskmanager_job_task_numRecordsIn{{{labels}}} {rate * (t - start)} {t}"
                    )
    return "\n".join([
        "# TYPE flink_taskmanager_job_task_operator_numRecordsOut counter", *out,
        "# TYPE flink_taskmanager_job_task_operator_pendingRecords gauge", *pending,
        "# TYPE flink_taskmanager_job_task_numRecordsIn counter", *records_in,
        "# TYPE flink_taskmanager_Status_JVM_CPU_Load gauge", *cpu,
        "# TYPE flink_jobmanager_job_uptime gauge", *uptime, "# EOF", "",
    ])  # fmt: skip


def _observe(url: str):
    # the data lie in the past: freshness is not checked here (its own tests cover it)
    config = PrometheusConfig(
        url=url,
        step_s=SCRAPE_S,
        timeout_s=2.0,
        query_freshness="",
        query_worker_freshness="",
        query_restarts="",
    )
    return PrometheusMetricsSource(config).observe(T_END, 60)


def _observations(tmp_path_factory, restart: bool) -> dict[int, Observation]:
    """The default queries' reading at T_END of the data scraped once and scraped twice."""
    readings = {}
    for copies, jobs in ((1, ("flink",)), (2, ("flink", "flink-again"))):
        text = _openmetrics(jobs, restart)
        for server in backfilled_prometheus(tmp_path_factory.mktemp("prometheus"), text):
            readings[copies] = _observe(server.url)
    return readings


def _rounded(values: np.ndarray) -> list[float]:
    return np.round(values, 6).tolist()


def _reading(observation: Observation) -> tuple:
    """The figures the default queries read, rounded: Prometheus adds series in no fixed order."""
    workers = [(w.worker_id, _rounded(w.cpu), _rounded(w.throughput_rps)) for w in observation.workers]
    return (
        _rounded(observation.input_rate_rps),
        workers,
        observation.backlog_records,
        observation.parallelism,
    )


def test_each_subtask_counts_once_however_often_it_was_scraped(tmp_path_factory):
    readings = _observations(tmp_path_factory, restart=False)
    assert _reading(readings[1]) == _reading(readings[2])
    observation = readings[2]
    assert observation.problems == ()
    np.testing.assert_allclose(observation.input_rate_rps, sum(RATES_RPS.values()), rtol=1e-6)
    throughput = {w.worker_id: w.throughput_rps for w in observation.workers}
    assert sorted(throughput) == ["tm-0", "tm-1"]
    np.testing.assert_allclose(throughput["tm-0"], RATES_RPS["0"], rtol=1e-6)
    np.testing.assert_allclose(throughput["tm-1"], RATES_RPS["1"], rtol=1e-6)
    assert all(np.allclose(w.cpu, 0.5) for w in observation.workers)
    assert observation.backlog_records == sum(PENDING.values())
    assert observation.parallelism == 2


def test_a_restarted_subtasks_two_attempts_add_up_to_its_rate_over_the_window(tmp_path_factory):
    readings = _observations(tmp_path_factory, restart=True)
    assert _reading(readings[1]) == _reading(readings[2])
    rates = readings[2].input_rate_rps
    # each attempt's rate() is its increase over the whole minute: together about the subtask's 200/s
    # (less the one scrape interval between the attempts), not one attempt's share of it
    grid = readings[2].input_timestamps_s
    after = grid > RESTART_AT
    np.testing.assert_allclose(rates[~after], 500, rtol=1e-6)
    assert np.all(rates[after] > 500 - 200 * 2 * SCRAPE_S / 60) and np.all(rates[after] <= 500 + 1e-6)
