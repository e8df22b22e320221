"""Driving the loop: on a virtual clock (the twin, faster than real time) or on wall time (apscheduler).

Both stop cleanly on SIGTERM/SIGINT: the running iteration finishes (it persists its knowledge), then the
driver returns.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from backends.retry import stop_waiting

Step = Callable[[float], bool]
"""One iteration at a given time; returns False when there is nothing more to do (end of a trace)."""


def stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT ask the driver to stop after the current iteration; a back-off or bounded wait
    inside that iteration (backends/retry.py) gives up at once, so it ends within a second."""

    def stop_now(*_: object) -> None:
        stop.set()
        stop_waiting()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop_now)


def run_virtual(
    step: Step, start_s: float, interval_s: float, stop: threading.Event, max_iterations: int | None
) -> int:
    """Iterations back to back on a virtual clock; returns how many ran."""
    count = 0
    now_s = start_s
    while not stop.is_set() and (max_iterations is None or count < max_iterations):
        now_s += interval_s
        if not step(now_s):
            break
        count += 1
    return count


class ScaledClock:
    """Wall time mapped onto virtual time: `speedup` virtual seconds per wall second from `start_s`."""

    def __init__(self, start_s: float, speedup: float, wall: Callable[[], float] = time.monotonic) -> None:
        self.start_s = start_s
        self.speedup = speedup
        self._wall = wall
        self._wall0 = wall()

    def now(self) -> float:
        return self.start_s + (self._wall() - self._wall0) * self.speedup


def run_scheduled(
    step: Step,
    clock: Callable[[], float],
    interval_s: float,
    stop: threading.Event,
    max_iterations: int | None,
) -> int:
    """Iterations every `interval_s` wall seconds with apscheduler: never two at once, missed runs coalesced."""
    count = 0
    lock = threading.Lock()

    def job() -> None:
        nonlocal count
        with lock:
            if stop.is_set():
                return
            if not step(clock()):
                stop.set()
                return
            count += 1
            if max_iterations is not None and count >= max_iterations:
                stop.set()

    scheduler = BackgroundScheduler(timezone="UTC")
    scheduler.add_job(
        job,
        IntervalTrigger(seconds=interval_s),
        max_instances=1,
        coalesce=True,
        misfire_grace_time=None,
        id="mape-loop",
    )
    scheduler.start()
    try:
        stop.wait()
    finally:
        scheduler.shutdown(wait=True)
    return count
