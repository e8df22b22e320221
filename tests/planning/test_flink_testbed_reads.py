"""planning/flink_testbed.py reads Flink's counters vertex by vertex, and Flink's REST API answers each
request from its latest fetch of the TaskManagers' metrics: a fetch that lands mid-read would mix two
instants. The REST answers are scripted here (a fetch landing between two chosen requests cannot be timed
on a real cluster); the e2e test runs the same reads against real Flink."""

from __future__ import annotations

import time

import pytest

import planning.flink_testbed as flink_testbed
from planning.flink_testbed import FlinkTestbedError, FlinkTestbedSettings, LocalFlinkTestbed

SOURCE, SINK = "v-source", "v-sink"


def _fetch(clock_ms: float, emitted: float, received: float) -> dict[str, dict[str, float]]:
    """One fetch of the metrics: the source's counters and gauges, and the sink's records in."""
    source = {"0.numRecordsOut": emitted, "0.pendingRecords": 5.0, "0.clockMs": clock_ms}
    return {SOURCE: source, SINK: {"0.numRecordsIn": received, "0.accumulateBusyTimeMs": 0.0}}


class ScriptedRest:
    """Serves fetch `generation[i]` to the i-th request (the last one from then on)."""

    def __init__(self, fetches: list[dict], generation: list[int]) -> None:
        self.fetches, self.generation, self.requests = fetches, generation, 0

    def __call__(self, vertex_id: str) -> dict[str, float]:
        index = self.generation[min(self.requests, len(self.generation) - 1)]
        self.requests += 1
        return dict(self.fetches[index][vertex_id])


def _testbed(tmp_path, monkeypatch, rest: ScriptedRest) -> LocalFlinkTestbed:
    monkeypatch.setattr(flink_testbed, "POLL_S", 0.0)
    bed = LocalFlinkTestbed(FlinkTestbedSettings(tmp_path, tmp_path, 100.0))
    bed._vertices = [(SOURCE, "source", 1, 0), (SINK, "sink", 1, 0)]
    bed._upstream = {"sink": "source"}
    monkeypatch.setattr(bed, "_vertex_metrics", rest)
    return bed


def test_a_fetch_landing_mid_read_is_read_again_so_the_records_in_flight_are_of_one_instant(
    tmp_path, monkeypatch
):
    now_ms = time.time() * 1000
    # stale, then a fresh fetch (source 1,000 out, sink 990 in), then the next one (1,100 and 1,090)
    fetches = [
        _fetch(now_ms - 5000, 0, 0),
        _fetch(now_ms + 1000, 1000, 990),
        _fetch(now_ms + 1500, 1100, 1090),
    ]
    # request 0 starts a fetch; the read then gets the source from fetch 1 and the sink from fetch 2
    rest = ScriptedRest(fetches, [0, 1, 2, 2, 2, 2, 2])
    counters = _testbed(tmp_path, monkeypatch, rest)._counters()

    assert counters.emitted == 1100 and counters.records_in["sink"] == (1090,)
    assert counters.pending == pytest.approx(5 + 10), "source pending + the 10 records in flight"
    assert counters.at_s == pytest.approx((now_ms + 1500) / 1000)


def test_a_read_of_one_fetch_is_taken_as_it_is(tmp_path, monkeypatch):
    now_ms = time.time() * 1000
    fetches = [_fetch(now_ms - 5000, 0, 0), _fetch(now_ms + 1000, 1000, 990)]
    rest = ScriptedRest(fetches, [0, 1])
    counters = _testbed(tmp_path, monkeypatch, rest)._counters()

    assert counters.pending == pytest.approx(15) and rest.requests == 4, "one start, one read of 3 requests"


def test_metrics_that_never_come_from_one_fresh_fetch_are_one_clear_error(tmp_path, monkeypatch):
    now_ms = time.time() * 1000
    monkeypatch.setattr(flink_testbed, "FRESH_TIMEOUT_S", 0.05)
    stale = [_fetch(now_ms - 5000, 0, 0)]
    with pytest.raises(FlinkTestbedError, match="no consistent metrics newer than"):
        _testbed(tmp_path, monkeypatch, ScriptedRest(stale, [0]))._counters()
