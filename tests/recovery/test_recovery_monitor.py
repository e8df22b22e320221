"""RecoveryMonitor: the loop hands over samples and never waits; results and failures come back by poll."""

from __future__ import annotations

import json
import math
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from structlog.testing import capture_logs

from forecasting.executor import InlineExecutor
from recovery.monitor import RecoveryMonitor
from recovery.tracker import RecoveryTracker
from tests.recovery.synthetic import batches, rescale_run

RESCALE_S = 100


def run_loop(monitor: RecoveryMonitor, run, start_at_s: float = RESCALE_S, size: int = 20) -> None:
    """What the daemon does: hand over each loop's samples, and announce the rescale when it happens."""
    started = False
    for batch in batches(*run, size=size):
        if not started and batch[0][0] >= start_at_s:
            monitor.start(start_at_s, "out", predicted_recovery_s=40.0, target_s=600.0)
            started = True
        monitor.submit(*batch)


def test_inline_monitor_learns_between_rescales_and_reports_the_recovery():
    monitor = RecoveryMonitor(InlineExecutor())
    run_loop(monitor, rescale_run())
    (observed,) = monitor.poll()
    assert (observed.downtime_s, observed.recovery_s, observed.recovered) == (12.0, 36.0, True)
    assert monitor.poll() == []
    assert not monitor.tracking
    # normal model: the 100 samples before the rescale, then the ones after the confirming sample
    # (the settle run ends at 136 + 10 - 1 = 145, so 146..399 = 254 samples), none of the watch's
    assert monitor.to_dict()["normal"]["n"] == 100 + 254


def test_overlapping_windows_count_each_sample_once():
    monitor = RecoveryMonitor(InlineExecutor())
    times, workload, throughput = rescale_run(end_s=90)
    monitor.submit(times[:60], workload[:60], throughput[:60])
    monitor.submit(times[30:], workload[30:], throughput[30:])
    assert monitor.to_dict()["normal"]["n"] == 90


def test_times_out_in_the_datas_time():
    monitor = RecoveryMonitor(InlineExecutor(), timeout_s=60.0)
    run_loop(monitor, rescale_run(catch_up_s=1000))
    (observed,) = monitor.poll()
    assert not observed.recovered and math.isnan(observed.recovery_s)


def test_expire_closes_a_watch_when_samples_stop_coming():
    monitor = RecoveryMonitor(InlineExecutor(), timeout_s=60.0)
    monitor.start(RESCALE_S, "in", predicted_recovery_s=20.0, target_s=30.0)
    monitor.expire(159.0)
    assert monitor.poll() == [] and monitor.tracking
    monitor.expire(160.0)
    (observed,) = monitor.poll()
    assert not observed.recovered and observed.direction == "in"


def test_a_new_rescale_closes_the_open_watch_unrecovered():
    monitor = RecoveryMonitor(InlineExecutor())
    monitor.start(100.0, "out", predicted_recovery_s=20.0, target_s=30.0)
    monitor.start(150.0, "in", predicted_recovery_s=20.0, target_s=30.0)
    (closed,) = monitor.poll()
    assert (closed.rescale_s, closed.recovered) == (100.0, False)
    assert monitor.tracking


class StuckTracker(RecoveryTracker):
    """A tracker whose feed hangs until the test releases it."""

    inside = threading.Event()
    release = threading.Event()

    def feed(self, *samples):
        StuckTracker.inside.set()
        StuckTracker.release.wait(timeout=30)
        StuckTracker.inside.clear()
        return super().feed(*samples)


def test_never_blocks_the_caller_and_surfaces_results_by_poll():
    StuckTracker.inside.clear()
    StuckTracker.release.clear()
    executor = ThreadPoolExecutor(max_workers=1)
    monitor = RecoveryMonitor(executor, tracker_cls=StuckTracker)
    try:
        run = rescale_run()
        before = tuple(s[:100] for s in run)
        monitor.submit(*before)
        monitor.start(RESCALE_S, "out", predicted_recovery_s=40.0, target_s=600.0)
        monitor.submit(*(s[100:140] for s in run))
        assert StuckTracker.inside.wait(timeout=10)  # the worker now hangs inside the tracker
        monitor.submit(*(s[140:] for s in run))
        assert monitor.poll() == []
        assert monitor.tracking  # the state from before the hanging task
        assert monitor.to_dict()["normal"]["n"] == 100
        assert StuckTracker.inside.is_set()  # all of the above returned while the worker still hung
    finally:
        StuckTracker.release.set()
        executor.shutdown(wait=True)  # runs everything queued: the synchronisation point
    (observed,) = monitor.poll()
    assert (observed.downtime_s, observed.recovery_s) == (12.0, 36.0)


class FailingTracker(RecoveryTracker):
    def feed(self, *samples):
        raise RuntimeError("tracker bug")


def test_a_failing_tracker_is_logged_and_never_reaches_the_caller():
    monitor = RecoveryMonitor(InlineExecutor(), timeout_s=60.0, tracker_cls=FailingTracker)
    times, workload, throughput = rescale_run()
    with capture_logs() as logs:
        run_loop(monitor, (times, workload, throughput))
    assert monitor.poll() == []
    assert not monitor.tracking
    failures = [e for e in logs if e["event"] == "recovery_monitor_task_failed"]
    assert failures and failures[0]["task"] == "samples" and failures[0]["log_level"] == "error"
    # the failed watch's window (until 100 + 60 s) stays out of the normal model; later samples count
    assert monitor.to_dict()["normal"]["n"] == 100 + (400 - 160)


def test_bad_samples_are_logged_and_dropped():
    monitor = RecoveryMonitor(InlineExecutor())
    with capture_logs() as logs:
        monitor.submit(np.arange(3.0), np.ones(3), np.ones(2))
        monitor.submit(np.arange(3.0), ["a", "b", "c"], np.ones(3))
    assert [e["event"] for e in logs] == ["recovery_monitor_bad_samples"] * 2
    assert monitor.to_dict()["normal"]["n"] == 0


def test_round_trip_mid_watch_resumes_watching():
    run = rescale_run()
    first = RecoveryMonitor(InlineExecutor())
    run_loop(first, tuple(s[:120] for s in run))
    assert first.tracking
    state = json.loads(json.dumps(first.to_dict()))
    resumed = RecoveryMonitor.from_dict(state, InlineExecutor())
    resumed.submit(*(s[110:] for s in run))  # overlaps what the first one saw
    (observed,) = resumed.poll()
    assert (observed.downtime_s, observed.recovery_s, observed.rescale_s) == (12.0, 36.0, 100.0)


def test_inline_executor_runs_at_once_and_keeps_exceptions_in_the_future():
    executor = InlineExecutor()
    assert executor.submit(lambda x: x + 1, 1).result() == 2

    def boom():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        executor.submit(boom).result()


def _steady(t0_s: float, seconds: int, rng: np.random.Generator, down_s: int = 0):
    times = np.arange(t0_s, t0_s + seconds)
    throughput = 1000.0 + rng.normal(0, 5, seconds)
    throughput[:down_s] = 0.0
    return times, np.full(seconds, 1000.0), throughput


def test_a_clock_stepped_back_during_a_watch_closes_it_unrecovered():
    """The open watch kept the old clock's times: it skipped every new sample and never expired, the normal
    band learned nothing meanwhile, and an hour later it reported a recovery stitched across the step."""
    rng = np.random.default_rng(0)
    monitor = RecoveryMonitor(InlineExecutor())
    monitor.submit(*_steady(10_000.0, 300, rng))
    monitor.start(10_300.0, "out", 60.0, 600.0)
    monitor.submit(*_steady(10_300.0, 60, rng, down_s=60))
    monitor.submit(*_steady(6_700.0, 60, rng))  # NTP steps the clock back an hour
    (closed,) = monitor.poll()
    assert not closed.recovered and not monitor.tracking
    learned = monitor.to_dict()["normal"]["n"]
    monitor.submit(*_steady(6_760.0, 60, rng))
    assert monitor.to_dict()["normal"]["n"] > learned


def test_a_window_held_as_implausible_feeds_no_normal_band():
    """One glitched sample at 5e7 rps widened the band for good: every later recovery read as done the
    second processing resumed (30 s for a true 130 s)."""
    rng = np.random.default_rng(0)
    monitor = RecoveryMonitor(InlineExecutor())
    times, workload, throughput = _steady(0.0, 3600, rng)
    monitor.submit(times[:100], workload[:100], throughput[:100])
    monitor.submit(times[100:200], workload[100:200], np.r_[5e7, throughput[101:200]], learn=False)
    monitor.submit(times[200:], workload[200:], throughput[200:])
    normal = monitor.to_dict()["normal"]
    assert normal["n"] == 3500 and math.sqrt(normal["m2"] / (normal["n"] - 1)) < 20.0
