"""The two drivers of the loop: virtual clock and apscheduler on wall time."""

from __future__ import annotations

import threading
import time

import numpy as np

from daemon.schedule import ScaledClock, run_scheduled, run_virtual, virtual_times


def test_virtual_driver_steps_by_the_interval_and_stops_on_request():
    stop = threading.Event()
    seen: list[float] = []

    def step(now_s: float) -> bool:
        seen.append(now_s)
        if len(seen) == 3:
            stop.set()  # as the SIGTERM handler does
        return True

    assert run_virtual(step, 100.0, 60.0, stop, None) == 3
    assert seen == [160.0, 220.0, 280.0]


def test_virtual_driver_ends_with_the_trace_or_the_iteration_budget():
    assert run_virtual(lambda now: now <= 300.0, 0.0, 60.0, threading.Event(), None) == 5
    assert run_virtual(lambda now: True, 0.0, 60.0, threading.Event(), 7) == 7


def test_scheduled_iterations_never_overlap_even_when_slower_than_the_interval():
    running, overlaps, calls = 0, 0, []
    guard = threading.Lock()

    def slow_step(now_s: float) -> bool:
        nonlocal running, overlaps
        with guard:
            running += 1
            overlaps = max(overlaps, running)
        calls.append(now_s)
        time.sleep(0.12)  # an iteration that takes longer than the 0.05 s interval (work, not sync)
        with guard:
            running -= 1
        return True

    count = run_scheduled(slow_step, time.monotonic, 0.05, threading.Event(), max_iterations=4)
    assert count == 4
    assert overlaps == 1
    assert calls == sorted(calls)


def test_scaled_clock_maps_wall_seconds_to_virtual_seconds():
    wall = iter([50.0, 50.0, 50.5, 52.0])
    clock = ScaledClock(start_s=1000.0, speedup=120.0, wall=lambda: next(wall))
    assert clock.now() == 1000.0
    assert clock.now() == 1060.0
    assert clock.now() == 1240.0


def test_the_daemon_runs_an_hpa_baseline_at_the_hpa_sync_period(tmp_path):
    """`foresail run` with an HPA policy iterates every baselines.hpa_sync_period_s (15 s), as `simulate`."""
    from config.schema import Config
    from daemon.runtime import run_daemon
    from mape.knowledge_store import KnowledgeStore

    path = tmp_path / "k.sqlite"
    config = Config.model_validate(
        {"scaling": {"policy": "hpa-80"}, "knowledge": {"path": str(path)}, "logging": {"level": "warning"}}
    )
    assert run_daemon(config, max_iterations=4) == 0
    store = KnowledgeStore(str(path))
    times = [d.time_s for d in store.decisions()]
    store.close()
    assert np.diff(times).tolist() == [15.0, 15.0, 15.0]


def test_virtual_times_put_the_watch_between_iterations_on_its_own_grid():
    times = virtual_times(100.0, 60.0, 25.0)
    assert [next(times) for _ in range(6)] == [
        (125.0, False),
        (150.0, False),
        (160.0, True),
        (175.0, False),
        (200.0, False),
        (220.0, True),
    ]
    assert [next(virtual_times(0.0, 60.0, None)) for _ in range(2)] == [(60.0, True), (60.0, True)]


def test_virtual_driver_runs_the_watch_between_iterations_and_counts_the_iterations_it_ran():
    watched: list[float] = []
    steps: list[float] = []

    def watch(now_s: float) -> bool:
        watched.append(now_s)
        return now_s == 100.0  # the watch ran an iteration here

    count = run_virtual(
        lambda now: steps.append(now) is None and now <= 120.0,
        0.0,
        60.0,
        threading.Event(),
        None,
        (watch, 20.0),
    )
    assert count == 3
    assert steps == [60.0, 120.0, 180.0]
    assert watched == [20.0, 40.0, 80.0, 100.0, 140.0, 160.0]
    # the iteration budget counts the watch's iterations too
    assert run_virtual(lambda now: True, 0.0, 60.0, threading.Event(), 2, (lambda now: True, 20.0)) == 2


def test_scheduled_watch_runs_often_and_never_beside_an_iteration():
    running, overlaps, watched = 0, 0, []
    guard = threading.Lock()

    def busy(record: list | None) -> None:
        nonlocal running, overlaps
        with guard:
            running += 1
            overlaps = max(overlaps, running)
        if record is not None:
            record.append(time.monotonic())
        time.sleep(0.03)  # work that takes a while, so that overlaps would show (not synchronisation)
        with guard:
            running -= 1

    def step(now_s: float) -> bool:
        busy(None)
        return True

    count = run_scheduled(step, time.monotonic, 0.2, threading.Event(), 3, (lambda now: busy(watched), 0.02))
    assert count == 3
    assert overlaps == 1
    assert len(watched) >= 1  # the watch ran between the iterations (how often depends on the machine's load)
