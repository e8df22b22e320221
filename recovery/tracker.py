"""Observed recovery of one rescale: when did processing resume, and when was the job normal again.

After a rescale the diff workload − throughput is anomalous (Daedalus §3.5): the job is down, then works
off its backlog faster than records arrive. The tracker classifies each new sample against the band of
normal behaviour frozen at the rescale and reports the first moment after the restart from which the
diff stays normal for `settle_samples` consecutive samples. The settle run keeps a catch-up whose
throughput merely sweeps through the band on its way up from zero from counting as a recovery.

Time is the data's: timestamps in seconds, as fed; the tracker never reads a clock.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from recovery.downtime import Direction
from recovery.normal import NormalBehaviour

SETTLE_SAMPLES = 10
"""Consecutive normal samples that confirm a recovery: 10 s at 1 s samples (choose ≥ 10 s of samples)."""
TIMEOUT_FACTOR = 3.0
"""Without an explicit timeout, a rescale is watched for this many recovery targets."""
FALLBACK_TIMEOUT_S = 1800.0
"""Watch length when neither a timeout nor a finite target is given."""
MIN_TOLERANCE_FRACTION = 0.02
"""The band is never narrower than this fraction of the workload: a job whose diff barely varied before
the rescale (std ≈ 0) would otherwise never look normal again through ordinary measurement noise."""
UNTRAINED_TOLERANCE_FRACTION = 0.1
"""Too few normal samples for a mean and std: normal means throughput within 10% of the workload."""


@dataclass(frozen=True)
class ObservedRecovery:
    """What one rescale cost, measured. Times are seconds after `rescale_s`.

    `downtime_s`: when processing resumed after the (last) stop; NaN when no stop was seen or processing
    never resumed. `recovery_s`: start of the first settled normal run after the restart; NaN when the
    watch ended unrecovered (timeout, superseded by another rescale).
    """

    rescale_s: float
    direction: Direction
    downtime_s: float
    recovery_s: float
    predicted_s: float
    target_s: float
    within_target: bool
    recovered: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ObservedRecovery:
        return cls(**data)


@dataclass(frozen=True)
class Band:
    """Normal diffs: |diff − centre_rps| ≤ max(half_width_rps, fraction × workload)."""

    centre_rps: float
    half_width_rps: float
    fraction: float

    def is_normal(self, diff_rps: float, workload_rps: float) -> bool:
        tolerance_rps = max(self.half_width_rps, self.fraction * abs(workload_rps))
        return abs(diff_rps - self.centre_rps) <= tolerance_rps


def band_of(
    normal: NormalBehaviour,
    k_std: float,
    min_fraction: float = MIN_TOLERANCE_FRACTION,
    untrained_fraction: float = UNTRAINED_TOLERANCE_FRACTION,
) -> Band:
    """The band of normal behaviour: mean ± k·std once trained, else a relative tolerance around 0."""
    if normal.trained:
        return Band(normal.mean_rps, k_std * normal.std_rps, min_fraction)
    return Band(0.0, 0.0, untrained_fraction)


@dataclass
class Watch:
    """State of one tracked rescale, kept between batches of samples (and across daemon restarts)."""

    rescale_s: float
    direction: Direction
    predicted_s: float
    target_s: float
    deadline_s: float
    band: Band
    last_timestamp_s: float | None = None  # latest sample classified
    last_down_s: float | None = None  # latest sample without processing
    resumed_s: float | None = None  # first processing sample after `last_down_s`
    disturbed: bool = False  # an anomalous or down sample has been seen since the rescale
    run_start_s: float = math.nan  # first sample of the current run of normal samples
    run_samples: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Watch:
        return cls(**{**data, "band": Band(**data["band"])})


class RecoveryTracker:
    """Watches one rescale at a time; feed it samples in time order, it answers once it knows."""

    def __init__(
        self,
        normal: NormalBehaviour,
        k_std: float = 1.0,
        settle_samples: int = SETTLE_SAMPLES,
        timeout_s: float | None = None,
        min_tolerance_fraction: float = MIN_TOLERANCE_FRACTION,
        untrained_tolerance_fraction: float = UNTRAINED_TOLERANCE_FRACTION,
    ) -> None:
        if settle_samples < 1:
            raise ValueError(f"settle_samples must be ≥ 1, got {settle_samples}")
        self.normal = normal
        self.k_std = k_std
        self.settle_samples = settle_samples
        self.timeout_s = timeout_s
        self.min_tolerance_fraction = min_tolerance_fraction
        self.untrained_tolerance_fraction = untrained_tolerance_fraction
        self.watch: Watch | None = None
        self.last_fed_s: float | None = None  # latest sample a watch classified; later ones were not read

    @property
    def active(self) -> bool:
        return self.watch is not None

    def start(
        self, rescale_s: float, direction: Direction, predicted_recovery_s: float, target_s: float
    ) -> None:
        """Begin watching a rescale issued at `rescale_s`; freezes the normal band as it is now."""
        self.watch = Watch(
            rescale_s=float(rescale_s),
            direction=direction,
            predicted_s=float(predicted_recovery_s),
            target_s=float(target_s),
            deadline_s=float(rescale_s) + self._timeout_for(target_s),
            band=band_of(
                self.normal, self.k_std, self.min_tolerance_fraction, self.untrained_tolerance_fraction
            ),
        )

    def feed(
        self, timestamps_s: np.ndarray, workload_rps: np.ndarray, throughput_rps: np.ndarray
    ) -> ObservedRecovery | None:
        """Classify new samples (ascending time); the observation once recovered or timed out, else None.

        A NaN throughput is a job that processed nothing (down). Samples before the rescale or not newer
        than the last one seen are skipped; samples with an unknown workload neither confirm nor break a
        run. Samples after the answer are left unread.
        """
        times = np.asarray(timestamps_s, dtype=float).ravel()
        workload = np.asarray(workload_rps, dtype=float).ravel()
        throughput = np.asarray(throughput_rps, dtype=float).ravel()
        if not len(times) == len(workload) == len(throughput):
            raise ValueError(
                f"sample arrays differ in length: {len(times)}, {len(workload)}, {len(throughput)}"
            )
        for t, w, thr in zip(times.tolist(), workload.tolist(), throughput.tolist(), strict=True):
            watch = self.watch
            if watch is None:
                return None
            seen_s = watch.last_timestamp_s
            if not math.isfinite(t) or t < watch.rescale_s or (seen_s is not None and t <= seen_s):
                continue
            if t >= watch.deadline_s:
                return self.close_unrecovered()
            watch.last_timestamp_s = self.last_fed_s = t
            observed = self._classify(watch, t, w, thr)
            if observed is not None:
                return observed
        return None

    def expire(self, now_s: float) -> ObservedRecovery | None:
        """Close the watch as not recovered when `now_s` is past its deadline (for when samples stop)."""
        if self.watch is not None and now_s >= self.watch.deadline_s:
            return self.close_unrecovered()
        return None

    def close_unrecovered(self) -> ObservedRecovery | None:
        """End the watch without a recovery (timeout, or superseded by another rescale)."""
        watch, self.watch = self.watch, None
        if watch is None:
            return None
        return _observation(watch, recovery_s=math.nan)

    def _classify(
        self, watch: Watch, t: float, workload: float, throughput: float
    ) -> ObservedRecovery | None:
        if not throughput > 0:  # NaN or 0: nothing processed
            watch.last_down_s, watch.resumed_s = t, None
            watch.disturbed, watch.run_samples = True, 0
            return None
        if watch.last_down_s is not None and watch.resumed_s is None:
            watch.resumed_s = t
        if math.isnan(workload):
            return None
        if not watch.band.is_normal(workload - throughput, workload):
            watch.disturbed, watch.run_samples = True, 0
            return None
        if watch.run_samples == 0:
            watch.run_start_s = t
        watch.run_samples += 1
        if watch.disturbed and watch.run_samples >= self.settle_samples:
            self.watch = None
            return _observation(watch, recovery_s=watch.run_start_s - watch.rescale_s)
        return None

    def _timeout_for(self, target_s: float) -> float:
        timeout_s = self.timeout_s if self.timeout_s is not None else TIMEOUT_FACTOR * target_s
        return timeout_s if math.isfinite(timeout_s) and timeout_s > 0 else FALLBACK_TIMEOUT_S

    def to_dict(self) -> dict[str, Any] | None:
        """The active watch (None when idle); the settings come from the configuration."""
        return None if self.watch is None else self.watch.to_dict()

    @classmethod
    def from_dict(
        cls, data: dict[str, Any] | None, normal: NormalBehaviour, **settings: Any
    ) -> RecoveryTracker:
        tracker = cls(normal, **settings)
        tracker.watch = None if data is None else Watch.from_dict(data)
        return tracker


def _observation(watch: Watch, recovery_s: float) -> ObservedRecovery:
    resumed_s = watch.resumed_s if watch.last_down_s is not None else None
    downtime_s = math.nan if resumed_s is None else resumed_s - watch.rescale_s
    recovered = not math.isnan(recovery_s)
    return ObservedRecovery(
        rescale_s=watch.rescale_s,
        direction=watch.direction,
        downtime_s=downtime_s,
        recovery_s=recovery_s,
        predicted_s=watch.predicted_s,
        target_s=watch.target_s,
        within_target=recovered and recovery_s <= watch.target_s,
        recovered=recovered,
    )
