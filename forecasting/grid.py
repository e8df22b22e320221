"""Input-rate samples onto a regular grid of buckets, the only form ARIMA accepts.

Rules (pinned by tests):
- A bucket k covers [k·resolution, (k+1)·resolution); its value is the mean of its samples and is
  placed at the bucket's centre.
- Duplicated timestamps: while a bucket is still open, the latest call wins (a re-queried window may
  carry revised values); NaN/inf and negative rates are ignored, so they never overwrite a value.
- A bucket is final once a sample at or after its end has arrived (the data's own watermark, not the
  clock), and only up to the last complete bucket that holds data, so a gap is closed only when
  data on its far side exist. Final buckets never change; samples arriving for them are counted as late
  and dropped, which is what makes each bucket reach the model exactly once.
- Gaps (empty buckets between data): up to `max_gap_buckets` are linearly interpolated, longer ones
  hold the last value; both are marked as not observed. A gap longer than `reset_gap_buckets` restarts
  the history (`epoch` increases): data from before it no longer describe the present.
- Clock steps: samples ahead of the loop's clock (when the caller passes it) are dropped; a batch whose
  newest sample lies more than `max_rewind_s` behind the watermark means the clock went back (an NTP
  step after a jump forward), and the history restarts at once instead of dropping every real sample
  as late for as long as the jump was.
"""

from __future__ import annotations

import math

import numpy as np

from messages.types import MAX_RATE_RPS

FUTURE_SLACK_S = 60.0
"""Samples up to this far ahead of the loop's clock are kept: clock skew between the metrics' source and
the loop is seconds; a sample further ahead carries a wrong clock, and would make all real ones late."""
MAX_REWIND_S = 300.0
"""The newest sample of a batch may lie this far behind the watermark before the clock counts as gone
back: an overlapping re-query ends at the watermark, and metrics lagging by minutes are stale anyway."""


def bucket_means(
    timestamps_s: np.ndarray, rates_rps: np.ndarray, resolution_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Bucket indices present in the samples, and the mean rate of each."""
    buckets = np.floor(np.asarray(timestamps_s, dtype=float) / resolution_s).astype(np.int64)
    present, inverse = np.unique(buckets, return_inverse=True)
    sums = np.bincount(inverse, weights=np.asarray(rates_rps, dtype=float))
    return present, sums / np.bincount(inverse)


def fill_gaps(values: np.ndarray, max_gap_buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """Fill NaN runs of `values` (first and last finite): interpolate short runs, hold long ones.

    Returns the filled values and a mask of the values that were observed.
    """
    values = np.asarray(values, dtype=float)
    observed = np.isfinite(values)
    if not (observed[0] and observed[-1]):
        raise ValueError("fill_gaps needs finite values at both ends")
    positions = np.arange(values.size)
    filled = np.interp(positions, positions[observed], values[observed])
    for start, stop in runs(~observed):
        if stop - start > max_gap_buckets:
            filled[start:stop] = values[start - 1]
    return filled, observed


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, stop) of every run of consecutive True values in `mask`, stop exclusive."""
    edges = np.diff(np.concatenate(([0], np.asarray(mask, dtype=np.int8), [0])))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist(), strict=True))


class BucketGrid:
    """The bounded, gap-filled bucket history the model and the fallback read."""

    def __init__(
        self,
        resolution_s: float,
        max_gap_buckets: int,
        retention_buckets: int,
        reset_gap_buckets: int,
        max_rewind_s: float = MAX_REWIND_S,
    ) -> None:
        self.resolution_s = resolution_s
        self.max_rewind_s = max(max_rewind_s, 2 * resolution_s)
        self.max_gap_buckets = max_gap_buckets
        self.retention_buckets = retention_buckets
        self.reset_gap_buckets = reset_gap_buckets
        self.first = 0
        self.values = np.empty(0)
        self.observed = np.empty(0, dtype=bool)
        self.epoch = 0
        self.watermark_s = -math.inf
        self.late_samples = 0
        self.future_samples = 0  # dropped for lying ahead of the loop's clock
        self.restart_reason = ""  # why the epoch last increased
        self._open: dict[float, float] = {}

    @property
    def end(self) -> int:
        """Index of the bucket after the last final one."""
        return self.first + self.values.size

    @property
    def span_s(self) -> float:
        return self.values.size * self.resolution_s

    def centres_s(self, start: int, stop: int) -> np.ndarray:
        """Centre times of buckets start .. stop-1 (absolute indices)."""
        return (np.arange(start, stop) + 0.5) * self.resolution_s

    def since(self, start: int) -> tuple[np.ndarray, np.ndarray]:
        """Values and observed mask of the retained buckets from absolute index `start` on."""
        offset = max(start - self.first, 0)
        return self.values[offset:], self.observed[offset:]

    def add(self, timestamps_s: np.ndarray, rates_rps: np.ndarray, now_s: float | None = None) -> int:
        """Take new samples (those after now_s + FUTURE_SLACK_S dropped); returns how many buckets became
        final."""
        timestamps_s = np.asarray(timestamps_s, dtype=float).ravel()
        rates_rps = np.asarray(rates_rps, dtype=float).ravel()
        if timestamps_s.shape != rates_rps.shape:
            raise ValueError("timestamps_s and rates_rps differ in length")
        # a rate above MAX_RATE_RPS is damage, not load: at 1.8e308 the model's sums overflow to inf
        valid = np.isfinite(timestamps_s) & (rates_rps >= 0) & (rates_rps <= MAX_RATE_RPS)
        if now_s is not None:
            ahead = valid & (timestamps_s > now_s + FUTURE_SLACK_S)
            self.future_samples += int(ahead.sum())
            valid &= ~ahead
        timestamps_s, rates_rps = timestamps_s[valid], rates_rps[valid]
        if timestamps_s.size == 0:
            return 0
        rewind_s = self.watermark_s - float(timestamps_s.max())
        if rewind_s > self.max_rewind_s:
            self._restart(f"the clock went back {rewind_s:.0f} s", forget_all=True)
        self.watermark_s = max(self.watermark_s, float(timestamps_s.max()))
        fresh = np.floor(timestamps_s / self.resolution_s) >= self.end
        if not self.values.size:
            fresh[:] = True
        self.late_samples += int((~fresh).sum())
        self._open.update(zip(timestamps_s[fresh].tolist(), rates_rps[fresh].tolist(), strict=True))
        return self._close_complete()

    def _close_complete(self) -> int:
        complete_end = math.floor(self.watermark_s / self.resolution_s)
        stamps = np.fromiter(self._open, dtype=float, count=len(self._open))
        ready = np.floor(stamps / self.resolution_s) < complete_end
        if not ready.any():
            return 0
        ready_stamps = stamps[ready].tolist()
        ready_rates = [self._open.pop(stamp) for stamp in ready_stamps]
        buckets, means = bucket_means(np.array(ready_stamps), np.array(ready_rates), self.resolution_s)
        before = np.concatenate(([self.end - 1 if self.values.size else buckets[0] - 1], buckets[:-1]))
        long_gaps = np.flatnonzero(buckets - before - 1 > self.reset_gap_buckets)
        if long_gaps.size:
            self._restart(f"a gap over {self.reset_gap_buckets * self.resolution_s:g} s")
            buckets, means = buckets[long_gaps[-1] :], means[long_gaps[-1] :]
        start = int(buckets[0]) if not self.values.size else self.end
        dense = np.full(int(buckets[-1]) - start + 1, np.nan)
        dense[buckets - start] = means
        if self.values.size:
            filled, observed = fill_gaps(np.concatenate(([self.values[-1]], dense)), self.max_gap_buckets)
            filled, observed = filled[1:], observed[1:]
        else:
            filled, observed = fill_gaps(dense, self.max_gap_buckets)
            self.first = start
        self.values = np.concatenate((self.values, filled))
        self.observed = np.concatenate((self.observed, observed))
        excess = self.values.size - self.retention_buckets
        if excess > 0:
            self.values, self.observed, self.first = (
                self.values[excess:],
                self.observed[excess:],
                self.first + excess,
            )
        return filled.size

    def _restart(self, reason: str, forget_all: bool = False) -> None:
        """A new epoch with no final bucket; `forget_all` also forgets the open samples and the watermark
        (they came from a clock that was wrong)."""
        self.values = np.empty(0)
        self.observed = np.empty(0, dtype=bool)
        self.epoch += 1
        self.restart_reason = reason
        if forget_all:
            self._open.clear()
            self.watermark_s = -math.inf

    def state_dict(self) -> dict[str, object]:
        """JSON-serialisable state (open samples included, so a restart loses no bucket)."""
        return {
            "resolution_s": self.resolution_s,
            "first": self.first,
            "values": self.values.tolist(),
            "observed": self.observed.tolist(),
            "epoch": self.epoch,
            "watermark_s": self.watermark_s if math.isfinite(self.watermark_s) else None,
            "late_samples": self.late_samples,
            "open_timestamps_s": list(self._open),
            "open_rates_rps": list(self._open.values()),
        }

    def load_state(self, state: dict) -> None:
        """Restore `state_dict()`; raises ValueError, leaving this grid as it was, on a state that does
        not fit: other resolution, damaged values, or open samples before the grid's end. Bucket indices
        only mean something at the resolution they were counted in, and a NaN at the grid's end would make
        every later add() fail in fill_gaps."""
        saved_s = state.get("resolution_s")  # absent in states saved before it was stored
        if saved_s is not None and float(saved_s) != self.resolution_s:
            raise ValueError(f"grid saved at resolution {saved_s!r} s, configured {self.resolution_s:g} s")
        first = int(state["first"])
        values = np.asarray(state["values"], dtype=float)
        observed = np.asarray(state["observed"], dtype=bool)
        watermark_s = -math.inf if state["watermark_s"] is None else float(state["watermark_s"])
        open_s = np.asarray(state["open_timestamps_s"], dtype=float)
        open_rps = np.asarray(state["open_rates_rps"], dtype=float)
        _check_state(first * self.resolution_s, values, observed, watermark_s, open_s, open_rps)
        if values.size and not math.isfinite(watermark_s):
            # add() sets the watermark before it closes a bucket; without one no later sample is ever
            # taken for a clock step, and a grid placed in the future takes every sample for late
            raise ValueError("grid state holds buckets but no newest sample time")
        end_s = (first + values.size) * self.resolution_s
        if values.size and end_s > watermark_s + self.resolution_s:
            # the grid never closes a bucket its watermark has not passed: another resolution's indices
            raise ValueError(f"grid ends at {end_s:g} s, after its newest sample at {watermark_s:g} s")
        if values.size and open_s.size and np.floor(open_s.min() / self.resolution_s) < first + values.size:
            raise ValueError("open samples lie before the grid's end")
        epoch, late_samples = int(state["epoch"]), int(state["late_samples"])
        self.first, self.values, self.observed = first, values, observed
        self.epoch, self.watermark_s, self.late_samples = epoch, watermark_s, late_samples
        self._open = dict(zip(open_s.tolist(), open_rps.tolist(), strict=True))


def _check_state(
    first_s: float,
    values: np.ndarray,
    observed: np.ndarray,
    watermark_s: float,
    open_s: np.ndarray,
    open_rps: np.ndarray,
) -> None:
    """Raise ValueError unless the saved arrays are what `add` could have produced."""
    if values.ndim != 1 or values.shape != observed.shape or open_s.shape != open_rps.shape:
        raise ValueError("grid state arrays differ in length")
    for name, rates in (("values", values), ("open rates", open_rps)):
        if not np.all(np.isfinite(rates) & (rates >= 0) & (rates <= MAX_RATE_RPS)):
            raise ValueError(f"grid state {name} are not all rates within 0..{MAX_RATE_RPS:g}")
    times_finite = math.isfinite(first_s) and bool(np.all(np.isfinite(open_s)))
    if not times_finite or not (math.isfinite(watermark_s) or watermark_s == -math.inf):
        raise ValueError("grid state times are not finite")
