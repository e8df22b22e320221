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
"""

from __future__ import annotations

import math

import numpy as np

from messages.types import MAX_RATE_RPS


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
        self, resolution_s: float, max_gap_buckets: int, retention_buckets: int, reset_gap_buckets: int
    ) -> None:
        self.resolution_s = resolution_s
        self.max_gap_buckets = max_gap_buckets
        self.retention_buckets = retention_buckets
        self.reset_gap_buckets = reset_gap_buckets
        self.first = 0
        self.values = np.empty(0)
        self.observed = np.empty(0, dtype=bool)
        self.epoch = 0
        self.watermark_s = -math.inf
        self.late_samples = 0
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

    def add(self, timestamps_s: np.ndarray, rates_rps: np.ndarray) -> int:
        """Take new samples; returns how many buckets became final."""
        timestamps_s = np.asarray(timestamps_s, dtype=float).ravel()
        rates_rps = np.asarray(rates_rps, dtype=float).ravel()
        if timestamps_s.shape != rates_rps.shape:
            raise ValueError("timestamps_s and rates_rps differ in length")
        # a rate above MAX_RATE_RPS is damage, not load: at 1.8e308 the model's sums overflow to inf
        valid = np.isfinite(timestamps_s) & (rates_rps >= 0) & (rates_rps <= MAX_RATE_RPS)
        timestamps_s, rates_rps = timestamps_s[valid], rates_rps[valid]
        if timestamps_s.size == 0:
            return 0
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
            self._restart()
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

    def _restart(self) -> None:
        self.values = np.empty(0)
        self.observed = np.empty(0, dtype=bool)
        self.epoch += 1

    def state_dict(self) -> dict[str, object]:
        """JSON-serialisable state (open samples included, so a restart loses no bucket)."""
        return {
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
        self.first = int(state["first"])
        self.values = np.asarray(state["values"], dtype=float)
        self.observed = np.asarray(state["observed"], dtype=bool)
        self.epoch = int(state["epoch"])
        self.watermark_s = -math.inf if state["watermark_s"] is None else float(state["watermark_s"])
        self.late_samples = int(state["late_samples"])
        self._open = dict(zip(state["open_timestamps_s"], state["open_rates_rps"], strict=True))
