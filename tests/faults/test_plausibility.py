"""Implausible metrics: each named, held on (never scaled on, never learned from), counted in /metrics."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from prometheus_client import generate_latest

from config.schema import Config
from daemon.build import knowledge_settings, make_loop
from daemon.health import DaemonMetrics
from mape import plausibility
from mape.knowledge import KnowledgeStore
from messages.types import Observation, WorkerSeries

NOW_S = 3_600.0
STAMPS = np.arange(NOW_S - 55, NOW_S + 1, 5.0)


def _observation(**changes: object) -> Observation:
    """Three workers at 300 records/s each and CPU 0.5, 1,000 records/s arriving, no backlog: plausible."""
    workers = tuple(
        WorkerSeries(f"tm-{i}", STAMPS, np.full(12, 0.5 + 0.01 * i), np.full(12, 300.0)) for i in range(3)
    )
    base = Observation(
        time_s=NOW_S,
        window_s=60.0,
        input_timestamps_s=STAMPS,
        input_rate_rps=np.full(12, 1_000.0),
        workers=workers,
        backlog_records=0.0,
        parallelism=3,
        uptime_s=1_800.0,
    )
    return dataclasses.replace(base, **changes)


def _worker(i: int, cpu: float = 0.5, throughput: float = 300.0) -> WorkerSeries:
    return WorkerSeries(f"tm-{i}", STAMPS, np.full(12, cpu), np.full(12, throughput))


CASES = {  # throughput-above-input is not held on (see mape/plausibility.py): tested on its own below
    "negative-rate": {"input_rate_rps": np.r_[np.full(10, 1_000.0), -50.0, -50.0]},
    "non-finite-rate": {"input_rate_rps": np.r_[np.full(11, 1_000.0), np.inf]},
    "cpu-out-of-range": {"workers": (_worker(0, cpu=45.0), _worker(1, cpu=52.0), _worker(2, cpu=47.0))},
    "parallelism-mismatch": {"parallelism": 5},
    "stale-samples": {"input_rate_rps": np.r_[np.full(4, 1_000.0), np.full(8, np.nan)]},
}


def test_a_plausible_observation_has_no_problem():
    assert plausibility.check(_observation()) == []


@pytest.mark.parametrize("reason", sorted(CASES))
def test_each_implausibility_is_named(reason):
    found = plausibility.check(_observation(**CASES[reason]))
    assert {p.reason for p in found} == {reason}
    assert set(plausibility.reasons_in([str(p) for p in found])) == {reason}


def test_throughput_above_input_is_named_unless_a_drained_backlog_explains_it():
    busy = _observation(workers=(_worker(0, throughput=9_000.0), _worker(1), _worker(2)))
    assert [p.reason for p in plausibility.throughput_above_input(busy, None)] == ["throughput-above-input"]
    drained = 9_000.0 * 55  # the previous window left this many records to drain
    assert plausibility.throughput_above_input(busy, drained) == []


class _Source:
    def __init__(self, observation: Observation) -> None:
        self.observation = observation

    def observe(self, now_s: float, window_s: float) -> Observation:
        return dataclasses.replace(self.observation, time_s=now_s)


class _Target:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def scale_to(self, scaleout: int, now_s: float) -> None:
        self.calls.append(scaleout)


@pytest.mark.parametrize("reason", sorted(CASES))
def test_the_loop_holds_never_learns_and_counts_the_reason(reason, fault):
    config = Config()
    store = KnowledgeStore(":memory:")
    knowledge = store.load(knowledge_settings(config))
    knowledge.last_target_scaleout = 3
    target, metrics = _Target(), DaemonMetrics()
    loop = make_loop(config, _Source(_observation(**CASES[reason])), target, knowledge, store)
    try:
        results = [loop.iterate(NOW_S + 60 * k) for k in range(3)]
    finally:
        knowledge.close()
    for result in results:
        metrics.record(result, 0.01)
    scaled = target.calls != [] or any(
        r.decision.target_scaleout != r.decision.current_scaleout for r in results
    )
    fault("implausible metrics", "scaled-on-bad-data" if scaled else "held", reason)
    assert target.calls == []
    assert {r.decision.rule for r in results} == {"hold-bad-data"}
    assert all(any(f"implausible[{reason}]" in p for p in r.decision.reasons) for r in results)
    assert knowledge.capacity.workers == {}  # nothing learned from it
    exposed = generate_latest(metrics.registry).decode()
    count = len([p for p in results[0].decision.reasons if p.startswith(f"implausible[{reason}]")])
    assert f'foresail_implausible_metrics_total{{reason="{reason}"}} {3.0 * count}' in exposed


def test_the_twin_never_looks_implausible(tmp_path):
    """No false alarms: 90 minutes of the sine workload on the twin, with its rescales and restarts."""
    from daemon.simulate import simulate
    from simulator.workload import builtin_sine

    trace = tmp_path / "sine.csv"
    rates = builtin_sine(duration_s=5_400, periods=1)
    trace.write_text("second|count\n" + "".join(f"{i}|{r:.0f}\n" for i, r in enumerate(rates)))
    no_arima = {"min_history_s": 86_400, "max_history_s": 86_400}  # the linear trend only: fast
    config = Config.model_validate(
        {"twin": {"workload": str(trace)}, "forecast": no_arima, "knowledge": {"path": ":memory:"}}
    )
    summary = simulate(config, audit_path=tmp_path / "audit.jsonl")
    events = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    problems = [p for e in events if e["inputs"] for p in e["inputs"]["problems"]]
    assert summary["rescales"] >= 1
    assert not [p for p in problems if p.startswith("implausible")]
