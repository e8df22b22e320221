"""The two drivers of the loop: virtual clock and apscheduler on wall time."""

from __future__ import annotations

import threading
import time

import numpy as np

from daemon.schedule import ScaledClock, run_scheduled, run_virtual


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
    from mape.knowledge import KnowledgeStore

    path = tmp_path / "k.sqlite"
    config = Config.model_validate(
        {"scaling": {"policy": "hpa-80"}, "knowledge": {"path": str(path)}, "logging": {"level": "warning"}}
    )
    assert run_daemon(config, max_iterations=4) == 0
    store = KnowledgeStore(str(path))
    times = [d.time_s for d in store.decisions()]
    store.close()
    assert np.diff(times).tolist() == [15.0, 15.0, 15.0]
