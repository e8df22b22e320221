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
from mape.knowledge_store import KnowledgeStore
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


CASES = {
    "negative-rate": {"input_rate_rps": np.r_[np.full(10, 1_000.0), -50.0, -50.0]},
    "non-finite-rate": {"input_rate_rps": np.r_[np.full(11, 1_000.0), np.inf]},
    "rate-out-of-range": {"input_rate_rps": np.r_[np.full(11, 1_000.0), 1e12]},  # scaled to the maximum
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


def test_the_short_window_rate_is_checked_like_the_input_rate():
    recent = np.r_[np.full(11, 1_000.0), np.inf]
    found = plausibility.check(_observation(recent_input_rate_rps=recent))
    assert [(p.reason, p.detail) for p in found] == [("non-finite-rate", "recent input rate is infinite")]
    assert plausibility.check(_observation(recent_input_rate_rps=np.full(12, 1_200.0))) == []


def test_a_backlog_beyond_an_hour_at_the_highest_rate_is_a_broken_lag_metric():
    """A lag of 10^15 records took the plan to its largest scale-out (reason `max-scaleout`)."""
    found = plausibility.check(_observation(backlog_records=1e15))
    assert [p.reason for p in found] == ["rate-out-of-range"] and "backlog of 1e+15" in found[0].detail
    assert plausibility.check(_observation(backlog_records=1e12)) == []  # 1,000 s at 10^9 records/s


def test_a_jvm_above_one_core_is_plausible_percent_is_not():
    jvm = (_worker(0, cpu=1.28), _worker(1, cpu=0.9), _worker(2, cpu=1.1))  # the e2e stack's TaskManagers
    assert plausibility.check(_observation(workers=jvm)) == []
    low_percent = (_worker(0, cpu=3.0), _worker(1), _worker(2))  # 3 % read as 3 cores
    assert [p.reason for p in plausibility.check(_observation(workers=low_percent))] == ["cpu-out-of-range"]


# --- stale samples, per series -----------------------------------------------------------------------


def _ending(i: int, samples: int) -> WorkerSeries:
    """Worker i whose series stop `samples` samples before the window's end."""
    values = np.r_[np.full(12 - samples, 300.0), np.full(samples, np.nan)]
    return WorkerSeries(f"tm-{i}", STAMPS, np.where(np.isnan(values), np.nan, 0.5), values)


def test_one_worker_that_stopped_reporting_is_named_while_the_job_still_counts_it():
    workers = (_worker(0), _ending(1, samples=8), _worker(2))  # tm-1's newest sample is 40 s old
    found = plausibility.check(_observation(workers=workers))
    stale = [p for p in found if p.reason == "stale-samples"]
    assert [p.detail for p in stale] == ["newest sample of worker tm-1 is 40 s old"]
    unknown_parallelism = plausibility.check(_observation(workers=workers, parallelism=None))
    assert "stale-samples" in {p.reason for p in unknown_parallelism}


def test_one_scrape_missed_at_the_newest_step_is_not_a_parallelism_mismatch():
    """Seen on real Flink under CI load: one TaskManager's newest rate step empty, the worker still in the job."""
    missed = np.r_[np.full(11, 300.0), np.nan]
    workers = (_worker(0), WorkerSeries("tm-1", STAMPS, np.full(12, 0.5), missed), _worker(2))
    assert plausibility.check(_observation(workers=workers)) == []
    gone = (_worker(0), _ending(1, samples=8), _worker(2))  # tm-1 silent for 40 s of 60
    assert "parallelism-mismatch" in {p.reason for p in plausibility.check(_observation(workers=gone))}


def test_a_worker_that_just_joined_without_a_throughput_sample_is_not_a_parallelism_mismatch():
    """Seen on the end-to-end Kubernetes path: 5 s after a scale-out was ready, the new TaskManager had CPU
    samples but its throughput meter had not been scraped yet."""
    joined = WorkerSeries("tm-3", STAMPS, np.r_[np.full(11, np.nan), 0.2], np.full(12, np.nan))
    workers = (_worker(0), _worker(1), _worker(2), joined)
    assert plausibility.check(_observation(workers=workers, parallelism=4)) == []
    missing = (_worker(0), _worker(1), _worker(2))  # the fourth worker not listed at all
    assert [p.reason for p in plausibility.check(_observation(workers=missing, parallelism=4))] == [
        "parallelism-mismatch"
    ]


def test_a_stale_cpu_series_alone_is_named_too():
    cpu_stopped = np.r_[np.full(4, 0.5), np.full(8, np.nan)]
    workers = (_worker(0), WorkerSeries("tm-1", STAMPS, cpu_stopped, np.full(12, 300.0)), _worker(2))
    found = plausibility.check(_observation(workers=workers))
    assert [p.detail for p in found] == ["newest sample of worker tm-1 is 40 s old"]


def test_a_worker_that_left_the_job_is_not_stale():
    left = (_worker(0), _ending(1, samples=8), _worker(2))
    assert plausibility.check(_observation(workers=left, parallelism=2)) == []  # scaled in: two remain
    just_restarted = _observation(workers=left, parallelism=3, uptime_s=30.0)  # workers come and go
    assert plausibility.check(just_restarted) == []
    late = _observation(workers=(_worker(0), _ending(1, samples=2), _worker(2)))  # 10 s: not yet stale
    assert plausibility.stale(late) == []


# --- throughput above input: conservation over a span the ledger covers ---------------------------------


def _at(
    time_s: float,
    input_rps: float | np.ndarray,
    throughput_rps: float | np.ndarray,
    backlog: float = 0.0,
    uptime_s: float = 3_600.0,
) -> Observation:
    """Three workers sharing `throughput_rps` (a 60 s rate, like Flink's meters) in the window up to
    `time_s`, samples every 5 s."""
    stamps = np.arange(time_s - 55, time_s + 1, 5.0)
    share = np.broadcast_to(np.asarray(throughput_rps, dtype=float) / 3, (12,))
    workers = tuple(WorkerSeries(f"tm-{i}", stamps, np.full(12, 0.5), share) for i in range(3))
    return Observation(
        time_s=time_s,
        window_s=60.0,
        input_timestamps_s=stamps,
        input_rate_rps=np.broadcast_to(np.asarray(input_rps, dtype=float), (12,)),
        workers=workers,
        backlog_records=backlog,
        parallelism=3,
        uptime_s=uptime_s,
    )


def _reasons(observations: list[Observation]) -> list[set[str]]:
    ledger = plausibility.Ledger()
    return [{p.reason for p in plausibility.check(o, ledger)} for o in observations]


def test_ten_times_the_input_with_no_backlog_holds_from_the_first_window_on():
    busy = [_at(NOW_S + 60 * k, 1_000.0, 10_000.0) for k in range(6)]
    # unverified until an observation lies a rate span and a window back, then named for what it is
    assert _reasons(busy) == [{"throughput-unverified"}] * 2 + [{"throughput-above-input"}] * 4
    first = plausibility.check(busy[0], plausibility.Ledger())[0].detail
    assert first.startswith("workers process 10000 records/s, but 1000 arrive and 0 wait, and no earlier")
    armed = plausibility.check(busy[2], _ledger_of([_at(NOW_S + 60 * k, 1_000.0, 1_000.0) for k in range(2)]))
    assert armed[0].detail.startswith("workers processed 600000 records in 60 s, but 120000 arrived")


def test_twice_the_input_is_named_once_the_span_outweighs_a_drain():
    double = [_at(NOW_S + 60 * k, 1_000.0, 2_000.0) for k in range(7)]
    # a drain of unknown size could explain a short span; over 300 s the bound no longer can
    assert _reasons(double) == [set()] * 5 + [{"throughput-above-input"}] * 2


def _ledger_of(observations: list[Observation]) -> plausibility.Ledger:
    ledger = plausibility.Ledger()
    for observation in observations:
        plausibility.check(observation, ledger)
    return ledger


def test_a_drained_backlog_explains_a_throughput_above_input():
    # 1,000 records/s arrive, the workers process 9,000/s until 2.4M waiting records are gone (300 s), and
    # their 60 s meters still read high for the minute after the backlog hit zero
    def backlog(t: float) -> float:
        return max(0.0, 2_400_000 - 8_000 * (t - NOW_S))

    def processed(t: np.ndarray) -> np.ndarray:
        drained_until = NOW_S + 300
        draining_s = np.clip(drained_until - (t - 60), 0, 60)  # of the meter's last 60 s
        return 1_000 + 8_000 * draining_s / 60

    observations = []
    for k in range(12):
        t = NOW_S + 60 * k
        stamps = np.arange(t - 55, t + 1, 5.0)
        observations.append(_at(t, 1_000.0, processed(stamps), backlog=backlog(t)))
    assert _reasons(observations) == [set()] * 12


def test_a_steady_job_and_an_idle_one_are_plausible():
    steady = [_at(NOW_S + 60 * k, 1_000.0, 1_000.0 * (1 + 0.2 * (-1) ** k)) for k in range(12)]
    idle = [_at(NOW_S + 60 * k, 0.0, 0.0) for k in range(12)]
    assert _reasons(steady) == [set()] * 12
    assert _reasons(idle) == [set()] * 12


def test_a_restart_that_replays_records_shows_them_in_the_backlog():
    # the job restarts at NOW_S + 150 from a checkpoint 100 s old: 100,000 records to read again, then
    # processed at 2,000 records/s over the input for 100 s
    before = [_at(NOW_S + 60 * k, 1_000.0, 1_000.0) for k in range(3)]
    after = [
        _at(NOW_S + 180, 1_000.0, 3_000.0, backlog=40_000.0, uptime_s=30.0),
        _at(NOW_S + 240, 1_000.0, np.r_[np.full(6, 3_000.0), np.linspace(3_000, 1_000, 6)], uptime_s=90.0),
        *(_at(NOW_S + 60 * k, 1_000.0, 1_000.0, uptime_s=60 * k - 150) for k in range(5, 12)),
    ]
    assert _reasons(before + after) == [set()] * 12


def test_a_restarted_daemon_checks_against_what_its_predecessor_saw():
    ledger = _ledger_of([_at(NOW_S + 60 * k, 1_000.0, 2_000.0) for k in range(5)])
    resumed = plausibility.Ledger.from_dict(json.loads(json.dumps(ledger.to_dict())))
    assert resumed == ledger
    double = _at(NOW_S + 300, 1_000.0, 2_000.0)
    assert plausibility.check(double, plausibility.Ledger()) == []  # a new ledger has no verdict yet
    assert [p.reason for p in plausibility.check(double, resumed)] == ["throughput-above-input"]
    assert plausibility.Ledger.from_dict({"samples": [["x"]]}) == plausibility.Ledger()
    assert plausibility.Ledger.from_dict(["not", "a", "ledger"]) == plausibility.Ledger()


def test_bad_data_never_becomes_the_reference():
    ledger = _ledger_of([_at(NOW_S + 60 * k, 1_000.0, 1_000.0) for k in range(3)])
    recorded = dict(ledger.samples)
    bad = _at(NOW_S + 180, 1_000.0, 20_000.0)
    assert [p.reason for p in plausibility.check(bad, ledger)] == ["throughput-above-input"]
    assert dict(ledger.samples) == recorded  # its backlog starts spans, its rates never count
    plausibility.check(_at(NOW_S + 240, 1_000.0, 1_000.0), ledger)
    assert max(ledger.samples) == NOW_S + 240 and len(ledger.backlogs) == 5


def test_the_ledger_forgets_what_is_older_than_its_horizon():
    ledger = _ledger_of([_at(NOW_S + 60 * k, 1_000.0, 1_000.0) for k in range(30)])
    now_s = NOW_S + 60 * 29
    assert min(ledger.samples) >= now_s - plausibility.LEDGER_HORIZON_S
    assert ledger.backlogs[0][0] >= now_s - plausibility.LEDGER_HORIZON_S


class _Source:
    def __init__(self, observation: Observation) -> None:
        self.observation = observation

    def observe(self, now_s: float, window_s: float) -> Observation:
        """The same samples, moved to the window up to `now_s`."""
        shift_s = now_s - self.observation.time_s
        moved = [
            dataclasses.replace(w, timestamps_s=w.timestamps_s + shift_s) for w in self.observation.workers
        ]
        return dataclasses.replace(
            self.observation,
            time_s=now_s,
            input_timestamps_s=self.observation.input_timestamps_s + shift_s,
            workers=tuple(moved),
        )


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


def test_the_loop_holds_on_a_throughput_ten_times_the_input_and_never_scales(fault):
    """A meter counting every record ten times: plausible alone, implausible against the input it had."""
    config = Config()
    store = KnowledgeStore(":memory:")
    knowledge = store.load(knowledge_settings(config))
    knowledge.last_target_scaleout = 3
    target = _Target()
    tenfold = _observation(workers=tuple(_worker(i, throughput=3_333.0) for i in range(3)))
    loop = make_loop(config, _Source(tenfold), target, knowledge, store)
    try:
        results = [loop.iterate(NOW_S + 60 * k) for k in range(6)]
    finally:
        knowledge.close()
    scaled = target.calls != [] or any(
        r.decision.target_scaleout != r.decision.current_scaleout for r in results
    )
    fault("implausible metrics", "scaled-on-bad-data" if scaled else "held", "throughput-above-input")
    assert target.calls == [] and not scaled
    assert {r.decision.rule for r in results} == {"hold-bad-data"}
    named = [{p.split("]")[0] for p in r.decision.reasons if p.startswith("implausible")} for r in results]
    # unverified until an observation lies a rate span and a window back, then named for what it is
    unverified, wrong = {"implausible[throughput-unverified"}, {"implausible[throughput-above-input"}
    assert named == [unverified] * 2 + [wrong] * 4
    assert knowledge.capacity.workers == {}  # nothing learned from it


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
