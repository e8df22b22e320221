"""Driving the loop: on a virtual clock (the twin, faster than real time) or on wall time (apscheduler).

Both stop cleanly on SIGTERM/SIGINT: the running iteration finishes (it persists its knowledge), then the
driver returns.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator

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


Watch = Callable[[float], bool]
"""The surge watch at a time between iterations (`MapeLoop.surge_seen`, then an iteration); True when it
ran one, which counts like any other."""


def virtual_times(start_s: float, interval_s: float, watch_s: float | None) -> Iterator[tuple[float, bool]]:
    """Times after `start_s` on a virtual clock: an iteration every `interval_s` (True) and, every
    `watch_s` in between, a surge watch (False). Endless: the caller stops."""
    next_iteration_s = start_s + interval_s
    next_watch_s = start_s + watch_s if watch_s else math.inf
    while True:
        now_s = min(next_iteration_s, next_watch_s)
        iteration = now_s == next_iteration_s
        if iteration:
            next_iteration_s += interval_s
        if now_s == next_watch_s:
            next_watch_s += watch_s or math.inf
        yield now_s, iteration


def run_virtual(
    step: Step,
    start_s: float,
    interval_s: float,
    stop: threading.Event,
    max_iterations: int | None,
    watch: tuple[Watch, float] | None = None,
) -> int:
    """Iterations back to back on a virtual clock, with the surge watch (and its period) between them;
    returns how many iterations ran."""
    count = 0
    surge_seen, watch_s = watch or (None, None)
    for now_s, iteration in virtual_times(start_s, interval_s, watch_s):
        if stop.is_set() or (max_iterations is not None and count >= max_iterations):
            break
        if surge_seen is not None and not iteration:
            count += surge_seen(now_s)
            continue
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
    watch: tuple[Watch, float] | None = None,
) -> int:
    """Iterations every `interval_s` wall seconds with apscheduler, and the surge watch every period it
    comes with: never two at once, missed runs coalesced."""
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

    def watch_job(surge_seen: Watch) -> None:
        nonlocal count
        with lock:
            if stop.is_set() or not surge_seen(clock()):
                return
            count += 1
            if max_iterations is not None and count >= max_iterations:
                stop.set()

    # A run skipped because the previous one still runs is this design ("never two at once"), yet
    # apscheduler warns of each on stderr: the watch skips whenever it waits on an iteration, and with
    # --speedup that flooded a test's stderr pipe until the daemon blocked writing to it (CI hung).
    # Its errors stay.
    logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
    scheduler = BackgroundScheduler(timezone="UTC")
    scheduler.add_job(
        job,
        IntervalTrigger(seconds=interval_s),
        max_instances=1,
        coalesce=True,
        misfire_grace_time=None,
        id="mape-loop",
    )
    if watch is not None:
        scheduler.add_job(
            watch_job,
            IntervalTrigger(seconds=watch[1]),
            args=(watch[0],),
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
            id="surge-watch",
        )
    scheduler.start()
    try:
        stop.wait()
    finally:
        scheduler.shutdown(wait=True)
    return count
