"""The surge watch: between iterations it reads the input rate alone and runs an iteration at once when
the load left the last forecast's upper bound and exceeds the running capacity (mape/recent_load.py,
`MapeLoop.surge_seen`). The real loop on the digital twin; the sources that lie or fail are small in-process
stand-ins wrapped around the twin's own source."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from structlog.testing import capture_logs

from config.load import parse_config
from config.schema import Config
from daemon.build import make_loop, make_twin, surge_watch_s
from daemon.simulate import simulate
from mape.knowledge import Knowledge
from mape.knowledge_store import KnowledgeStore
from mape.recent_load import expected_upper_rps, observed_recent_rps, recent_rps, surging
from messages.types import RECENT_S, Observation

STEP_S = 1215
"""The step trace: 20k rps, then 50k from here (between two 60 s iterations)."""


@pytest.fixture(scope="module")
def step_trace(tmp_path_factory) -> Path:
    trace = tmp_path_factory.mktemp("traces") / "step.csv"
    rows = "".join(f"{s}|{20000 if s < STEP_S else 50000}\n" for s in range(1800))
    trace.write_text("second|count\n" + rows)
    return trace


def test_recent_rate_is_the_mean_of_the_last_seconds_and_the_newest_sample_by_time():
    times = np.array([100.0, 90.0, 95.0, 80.0])  # out of order on purpose
    rates = np.array([300.0, 100.0, np.nan, 999.0])
    mean, newest = recent_rps(times, rates, now_s=100.0)
    assert (mean, newest) == (200.0, 300.0)  # 80 is older than RECENT_S, 95 is a gap
    assert all(math.isnan(v) for v in recent_rps(times, np.full(4, np.nan), 100.0))
    assert RECENT_S == 15


def test_an_observation_is_judged_on_its_short_window_rate_where_that_has_samples():
    times = np.array([90.0, 95.0, 100.0])

    def observation(recent: np.ndarray | None) -> Observation:
        smoothed = np.array([100.0, 110.0, 120.0])  # a minute's rate still climbing towards the step
        return Observation(100.0, 60.0, times, smoothed, (), None, None, None, recent_input_rate_rps=recent)

    assert observed_recent_rps(observation(np.array([240.0, 270.0, 300.0]))) == (270.0, 300.0)
    # no short-window samples: the input rate
    assert observed_recent_rps(observation(np.full(3, np.nan))) == (110.0, 120.0)
    assert observed_recent_rps(observation(None)) == (110.0, 120.0)


def test_only_a_known_forecast_and_capacity_make_a_surge():
    assert surging(150.0, expected_upper=100.0, capacity_rps=120.0)
    assert not surging(110.0, expected_upper=100.0, capacity_rps=120.0)  # the capacity carries it
    assert not surging(150.0, expected_upper=160.0, capacity_rps=120.0)  # foreseen
    assert not surging(150.0, expected_upper=math.nan, capacity_rps=120.0)
    assert not surging(150.0, expected_upper=100.0, capacity_rps=math.nan)
    assert math.isnan(expected_upper_rps(None, 100.0))


class _Lying:
    """The twin's source for observations; the rate the watch reads is scripted (or raises)."""

    def __init__(self, inner, rate_rps: float | Exception) -> None:
        self.inner, self.rate_rps, self.reads = inner, rate_rps, 0

    def observe(self, now_s: float, window_s: float):
        return self.inner.observe(now_s, window_s)

    def input_rate(self, now_s: float, window_s: float):
        self.reads += 1
        if isinstance(self.rate_rps, Exception):
            raise self.rate_rps
        times = np.arange(now_s - window_s + 5, now_s + 1, 5.0)
        return times, np.full(len(times), self.rate_rps)


def _warm_loop(step_trace: Path, until_s: float = 1200.0):
    config = parse_config({"twin": {"workload": str(step_trace)}, "knowledge": {"path": ":memory:"}}, "t")
    world = make_twin(config)
    loop = make_loop(config, world.source, world.target, Knowledge(), KnowledgeStore(":memory:"))
    now_s = 0.0
    while now_s < until_s:
        now_s += 60.0
        world.twin.advance_to(now_s)
        loop.iterate(now_s)
    return world, loop, now_s


def test_a_surge_runs_an_iteration_on_the_second_read_that_confirms_its_level(step_trace):
    world, loop, now_s = _warm_loop(step_trace)  # 1200 s; the step comes at 1215
    loop.source = _Lying(world.source, 90000.0)
    iterations = loop.knowledge.iteration
    world.twin.advance_to(now_s + 40)
    assert not loop.surge_seen(now_s + 30)  # a first read may catch a step half-way up its meter's ramp
    assert loop.surge_seen(now_s + 40)
    assert loop.knowledge.iteration == iterations  # the watch only reads; the driver iterates
    result = loop.iterate(now_s + 40)
    assert result.decision.rule == "surge" and result.executed
    # its restart is the reaction: quiet for a loop interval after it
    world.twin.advance_to(now_s + 60)
    assert not loop.surge_seen(now_s + 50) and not loop.surge_seen(now_s + 60)
    assert loop.source.reads == 2


def test_a_read_below_the_forecast_interval_resets_the_confirmation(step_trace):
    world, loop, now_s = _warm_loop(step_trace)
    source = _Lying(world.source, 90000.0)
    loop.source = source
    assert not loop.surge_seen(now_s + 10)
    source.rate_rps = 20000.0  # a blip, gone at the next read
    assert not loop.surge_seen(now_s + 20)
    source.rate_rps = 90000.0
    assert not loop.surge_seen(now_s + 30)
    assert source.reads == 3


def test_the_watch_waits_while_the_rate_still_climbs_up_its_meters_ramp(step_trace):
    world, loop, now_s = _warm_loop(step_trace)
    source = _Lying(world.source, 40000.0)
    loop.source = source
    world.twin.advance_to(now_s + 50)
    for offset_s, rate_rps in ((10, 40000.0), (20, 60000.0), (30, 80000.0)):  # a step behind a 1 min rate
        source.rate_rps = rate_rps
        assert not loop.surge_seen(now_s + offset_s)
    source.rate_rps = 80500.0  # within 2% of the read before: the level has settled
    assert loop.surge_seen(now_s + 40)


def test_a_failing_or_missing_rate_read_is_one_line_and_no_iteration(step_trace):
    world, loop, now_s = _warm_loop(step_trace)
    loop.source = _Lying(world.source, ConnectionError("prometheus: connection refused"))
    with capture_logs() as events:
        assert not loop.surge_seen(now_s + 10)
    (event,) = [e for e in events if e["event"] == "surge-watch-unreadable"]
    assert "ConnectionError" in event["error"]

    class ObserveOnly:
        observe = world.source.observe

    loop.source = ObserveOnly()
    assert not loop.surge_seen(now_s + 20)


def test_no_watch_before_the_first_assessment_or_without_a_forecast(step_trace):
    config = parse_config({"twin": {"workload": str(step_trace)}, "knowledge": {"path": ":memory:"}}, "t")
    world = make_twin(config)
    loop = make_loop(
        config, _Lying(world.source, 90000.0), world.target, Knowledge(), KnowledgeStore(":memory:")
    )
    world.twin.advance_to(10.0)
    assert not loop.surge_seen(10.0) and loop.source.reads == 0
    for policy in ("reactive", "hpa-80", "static", "flink-operator"):
        assert surge_watch_s(Config.model_validate({"scaling": {"policy": policy}})) is None
    assert surge_watch_s(Config.model_validate({"loop": {"surge_watch_s": None}})) is None
    assert surge_watch_s(Config.model_validate({"loop": {"surge_watch_s": 60}})) is None
    assert surge_watch_s(Config()) == 10.0


def test_an_informed_daemon_looks_once_the_rate_settles_instead_of_waiting_for_its_first_loop(step_trace):
    """A store a capacity plan seeded knows capacities before the first iteration: the watch runs that
    iteration at its second read of a settled rate, with no forecast to judge a surge by yet."""
    config = parse_config({"twin": {"workload": str(step_trace)}, "knowledge": {"path": ":memory:"}}, "t")
    world = make_twin(config)
    informed = Knowledge()
    informed.capacity.seed({n: 5000.0 * n for n in range(1, 13)}, 0.0)
    source = _Lying(world.source, 18000.0)
    loop = make_loop(config, source, world.target, informed, KnowledgeStore(":memory:"))
    world.twin.advance_to(30.0)
    assert not loop.surge_seen(10.0)  # one read: the level is not confirmed yet
    source.rate_rps = 20000.0  # a meter still climbing to the job's rate
    assert not loop.surge_seen(20.0)
    with capture_logs() as events:
        assert loop.surge_seen(30.0)
    assert [e["recent_rps"] for e in events if e["event"] == "first-look"] == [20000.0]
    decision = loop.iterate(30.0).decision
    assert decision.time_s == 30.0 and loop.last_assessment is not None
    assert not loop.surge_seen(40.0), "after its first iteration only a surge runs one"


def _surges(step_trace: Path, tmp_path: Path, watch_s: float | None) -> tuple[dict, list[dict]]:
    audit = tmp_path / f"audit-{watch_s}.jsonl"
    config = {"twin": {"workload": str(step_trace)}, "loop": {"surge_watch_s": watch_s}}
    summary = simulate(parse_config({**config, "knowledge": {"path": ":memory:"}}, "t"), audit_path=audit)
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    return summary, [e for e in events if e["event"] == "iteration" and e["decision"]["rule"] == "surge"]


def test_the_watch_meets_a_step_within_two_reads_where_the_loop_waits_for_its_interval(step_trace, tmp_path):
    watched, with_watch = _surges(step_trace, tmp_path, 10.0)
    waited, without = _surges(step_trace, tmp_path, None)
    assert STEP_S < with_watch[0]["time_s"] <= STEP_S + 30  # read at 1220 (half a meter), 1230, 1240
    assert without[0]["time_s"] == 1260.0  # the next 60 s iteration
    assert watched["seconds_over_slo"] < waited["seconds_over_slo"]
    assert watched["rescales"] <= waited["rescales"]


def test_the_twin_reads_the_same_input_rate_alone_as_in_an_observation(step_trace):
    config = parse_config({"twin": {"workload": str(step_trace)}}, "t")
    world = make_twin(config)
    world.twin.advance_to(1230.0)
    times, rates = world.source.input_rate(1230.0, 15.0)
    observation = world.source.observe(1230.0, 15.0)
    np.testing.assert_array_equal(times, observation.input_timestamps_s)
    np.testing.assert_array_equal(rates, observation.input_rate_rps)
    assert rates[-1] > rates[0]  # the step, seen through the twin's rate meter
