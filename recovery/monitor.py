"""Observed recovery, run off the loop: the loop hands over samples and collects finished observations.

Work (new samples, a rescale to watch, a clock tick) is queued and processed in order on an executor — a
one-thread pool by default, `InlineExecutor` for deterministic simulations — so the loop never waits
for the anomaly detection (Daedalus §3.5 runs it in a background thread). Between rescales the samples
train the normal-behaviour model; during a watch they go to the tracker. A watch ends recovered, or not
recovered when the data's time passes rescale + timeout. Nothing raised while processing reaches the
caller: it is logged, and the watch it broke is dropped.
"""

from __future__ import annotations

import copy
import math
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

import numpy as np
import structlog

from recovery.downtime import Direction
from recovery.normal import NormalBehaviour
from recovery.tracker import SETTLE_SAMPLES, ObservedRecovery, RecoveryTracker

_log = structlog.get_logger(__name__)
STEPPED_BACK_S = 600.0
"""A batch this far behind the last sample seen comes from a clock that stepped back, not an overlap."""


class RecoveryMonitor:
    """Learns normal behaviour between rescales and watches each rescale until it has recovered."""

    def __init__(
        self,
        executor: Executor | None = None,
        timeout_s: float | None = None,
        *,
        k_std: float = 1.0,
        settle_samples: int = SETTLE_SAMPLES,
        normal: NormalBehaviour | None = None,
        tracker_cls: type[RecoveryTracker] = RecoveryTracker,
    ) -> None:
        """`timeout_s`: how long (data time) a rescale is watched; None = 3 × its recovery target.
        `tracker_cls` lets tests and variants swap the tracker; it is built with the settings here."""
        self._owns_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="recovery-monitor")
        self._settings: dict[str, Any] = {
            "k_std": k_std,
            "settle_samples": settle_samples,
            "timeout_s": timeout_s,
        }
        self._tracker_cls = tracker_cls
        # Worker-side state: touched only by tasks, which run one at a time under _work_lock.
        self._normal = normal or NormalBehaviour()
        self._tracker: RecoveryTracker | None = None
        self._last_timestamp_s: float | None = None
        self._quiet_until_s: float | None = None  # after a failed watch: keep its samples out of the model
        # Shared with the caller, each guarded by a short-lived lock the worker never holds while working.
        self._work_lock = threading.Lock()
        self._queue_lock = threading.Lock()
        self._queue: deque[tuple[str, Callable[[], None]]] = deque()
        self._results_lock = threading.Lock()
        self._results: list[ObservedRecovery] = []
        self._snapshot: dict[str, Any] = self._state()

    # ---- caller side: every method returns at once ----

    def start(
        self, rescale_s: float, direction: Direction, predicted_recovery_s: float, target_s: float
    ) -> None:
        """Watch the rescale issued at `rescale_s` (data time). A watch still open is closed unrecovered."""
        self._enqueue("start", lambda: self._start(rescale_s, direction, predicted_recovery_s, target_s))

    def submit(
        self,
        timestamps_s: np.ndarray,
        workload_rps: np.ndarray,
        throughput_rps: np.ndarray,
        learn: bool = True,
    ) -> None:
        """Hand over one loop's new samples (copied, so the caller may reuse its arrays). Without `learn`
        (a window the loop holds on as implausible) they still feed a watch, but not the normal band: one
        glitched sample at 5e7 rps widened it for good, and every recovery then read as done at once."""
        try:
            batch = tuple(
                np.array(values, dtype=float).ravel()
                for values in (timestamps_s, workload_rps, throughput_rps)
            )
        except (TypeError, ValueError):
            _log.exception("recovery_monitor_bad_samples")
            return
        if len({len(values) for values in batch}) != 1:
            _log.error("recovery_monitor_bad_samples", lengths=[len(values) for values in batch])
            return
        self._enqueue("samples", lambda: self._samples(*batch, learn=learn))

    def expire(self, now_s: float) -> None:
        """Close a watch past its deadline at `now_s` (data time) even if no samples arrive any more."""
        self._enqueue("expire", lambda: self._expire(now_s))

    def poll(self) -> list[ObservedRecovery]:
        """Observations finished since the last poll, oldest first."""
        with self._results_lock:
            results, self._results = self._results, []
        return results

    @property
    def tracking(self) -> bool:
        """Whether a rescale was being watched after the last finished task."""
        with self._results_lock:
            return self._snapshot["tracker"] is not None

    def to_dict(self) -> dict[str, Any]:
        """State after the last finished task (work still queued is not included)."""
        with self._results_lock:
            return copy.deepcopy(self._snapshot)

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], executor: Executor | None = None, **options: Any
    ) -> RecoveryMonitor:
        """Resume from `to_dict()`, including a watch in progress; `options` as for the constructor."""
        monitor = cls(executor, normal=NormalBehaviour.from_dict(data["normal"]), **options)
        if data.get("tracker") is not None:
            monitor._tracker = monitor._tracker_cls.from_dict(
                data["tracker"], monitor._normal, **monitor._settings
            )
        monitor._last_timestamp_s = _time(data.get("last_timestamp_s"))
        monitor._quiet_until_s = _time(data.get("quiet_until_s"))
        monitor._snapshot = monitor._state()
        return monitor

    def close(self) -> None:
        """Stop the monitor's own thread pool (an executor passed in is left to its owner)."""
        if self._owns_executor:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def _enqueue(self, name: str, task: Callable[[], None]) -> None:
        with self._queue_lock:
            self._queue.append((name, task))
        try:
            self._executor.submit(self._drain)
        except RuntimeError:  # executor shut down
            _log.exception("recovery_monitor_executor_unavailable", task=name)

    # ---- worker side ----

    def _drain(self) -> None:
        with self._work_lock:
            while True:
                with self._queue_lock:
                    if not self._queue:
                        return
                    name, task = self._queue.popleft()
                try:
                    task()
                except Exception:
                    _log.exception("recovery_monitor_task_failed", task=name)
                    self._abandon_watch()
                snapshot = self._state()
                with self._results_lock:
                    self._snapshot = snapshot

    def _start(
        self, rescale_s: float, direction: Direction, predicted_recovery_s: float, target_s: float
    ) -> None:
        if self._tracker is not None:
            self._finish(self._tracker.close_unrecovered(), reason="superseded")
        tracker = self._tracker_cls(self._normal, **self._settings)
        tracker.start(rescale_s, direction, predicted_recovery_s, target_s)
        self._tracker = tracker
        band = tracker.watch.band if tracker.watch is not None else None
        _log.info(
            "recovery_watch_started",
            rescale_s=rescale_s,
            direction=direction,
            predicted_s=predicted_recovery_s,
            target_s=target_s,
            normal_samples=self._normal.n,
            band=None if band is None else vars(band),
        )

    def _samples(
        self, times: np.ndarray, workload: np.ndarray, throughput: np.ndarray, learn: bool = True
    ) -> None:
        order = np.argsort(times, kind="stable")
        times, workload, throughput = times[order], workload[order], throughput[order]
        fresh = np.isfinite(times)
        newest_s = float(times[fresh].max()) if fresh.any() else math.nan
        if self._last_timestamp_s is not None and newest_s < self._last_timestamp_s - STEPPED_BACK_S:
            # a clock stepped back (or a store from a clock ahead) dropped every later sample as seen,
            # and nothing was learned again: start counting from these
            _log.warning(
                "recovery_monitor_clock_behind", last_seen_s=self._last_timestamp_s, newest_s=newest_s
            )
            self._last_timestamp_s = None
            if self._quiet_until_s is not None and self._quiet_until_s > newest_s + STEPPED_BACK_S:
                self._quiet_until_s = None
            if self._tracker is not None:  # its times are the old clock's: it would skip every sample
                self._finish(self._tracker.close_unrecovered(), reason="clock-stepped-back")
        if self._last_timestamp_s is not None:
            fresh &= times > self._last_timestamp_s  # overlapping windows: each sample counts once
        times, workload, throughput = times[fresh], workload[fresh], throughput[fresh]
        if len(times) == 0:
            return
        self._last_timestamp_s = float(times[-1])
        if self._tracker is not None:
            observed = self._tracker.feed(times, workload, throughput)
            if observed is None:
                return
            watched_until_s = self._tracker.last_fed_s
            self._finish(observed, reason="recovered" if observed.recovered else "timeout")
            after = times > (watched_until_s if watched_until_s is not None else -math.inf)
            times, workload, throughput = times[after], workload[after], throughput[after]
        if self._quiet_until_s is not None:
            quiet = times < self._quiet_until_s
            times, workload, throughput = times[~quiet], workload[~quiet], throughput[~quiet]
        if learn:
            self._normal.update(workload, throughput)

    def _expire(self, now_s: float) -> None:
        if self._tracker is not None:
            observed = self._tracker.expire(now_s)
            if observed is not None:
                self._finish(observed, reason="timeout")

    def _finish(self, observed: ObservedRecovery | None, reason: str) -> None:
        self._tracker = None
        if observed is None:
            return
        _log.info("recovery_observed", reason=reason, **observed.to_dict())
        with self._results_lock:
            self._results.append(observed)

    def _abandon_watch(self) -> None:
        """After a failure, drop the watch and keep the rest of its window out of the normal model."""
        tracker, self._tracker = self._tracker, None
        watch = getattr(tracker, "watch", None)
        deadline_s = getattr(watch, "deadline_s", None)
        if isinstance(deadline_s, float) and math.isfinite(deadline_s):
            self._quiet_until_s = max(deadline_s, self._quiet_until_s or -math.inf)

    def _state(self) -> dict[str, Any]:
        return {
            "normal": self._normal.to_dict(),
            "tracker": None if self._tracker is None else self._tracker.to_dict(),
            "last_timestamp_s": self._last_timestamp_s,
            "quiet_until_s": self._quiet_until_s,
        }


def _time(value: Any) -> float | None:
    """A stored sample time; None for none, and for one that is no finite number."""
    if value is None:
        return None
    time_s = float(value)
    return time_s if math.isfinite(time_s) else None
