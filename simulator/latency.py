"""Record latency from cumulative arrival and departure curves (FIFO), without per-record work.

Records are Kafka offsets 0, 1, 2, ...; offset k arrived in the second s with A(s) <= k < A(s+1), where A
is the cumulative arrival count before each second. Records processed in second t have latency
(t - s) + base. Delays are whole seconds, so a histogram indexed by delay is exact at the model's
resolution, and a replayed record simply counts again with its original arrival second.
"""

from __future__ import annotations

import numpy as np


class LatencyTracker:
    """Weighted latency histogram plus the worst latency of every second."""

    def __init__(self, cumulative_arrivals: np.ndarray, base_latency_s: float) -> None:
        # cumulative_arrivals[s] = records that arrived before second s (length = seconds + 1, starts at 0)
        self._cum = cumulative_arrivals
        self.base_latency_s = base_latency_s
        self._hist = np.zeros(64, dtype=np.int64)
        self._max_delay_s = -1

    def arrival_second(self, offset: int) -> int:
        """Second in which the record at this offset arrived."""
        return int(np.searchsorted(self._cum, offset, side="right")) - 1

    def record_processed(self, t_s: int, first: int, end: int) -> float:
        """Account records [first, end) processed in second t_s; return their worst latency."""
        s_first = self.arrival_second(first)
        s_last = self.arrival_second(end - 1)
        oldest_delay = t_s - s_first
        self._grow(oldest_delay)
        if s_first == s_last:
            self._hist[oldest_delay] += end - first
        else:
            bounds = self._cum[s_first + 1 : s_last + 1]
            starts = np.concatenate(([first], bounds))
            ends = np.concatenate((bounds, [end]))
            # arrival seconds s_first..s_last have delays oldest_delay..t-s_last, descending
            self._hist[t_s - s_last : oldest_delay + 1] += (ends - starts)[::-1]
        self._max_delay_s = max(self._max_delay_s, oldest_delay)
        return oldest_delay + self.base_latency_s

    def waiting_age(self, t_s: int, oldest_offset: int) -> float:
        """Latency the oldest waiting record has accrued by second t_s (its age plus the base latency)."""
        return t_s - self.arrival_second(oldest_offset) + self.base_latency_s

    def _grow(self, delay_s: int) -> None:
        if delay_s >= len(self._hist):
            bigger = np.zeros(max(2 * len(self._hist), delay_s + 1), dtype=np.int64)
            bigger[: len(self._hist)] = self._hist
            self._hist = bigger

    @property
    def histogram(self) -> np.ndarray:
        """Records processed (replays included) per whole-second delay; latency = index + base."""
        return self._hist[: self._max_delay_s + 1].copy()

    def summary(self, before: np.ndarray | None = None) -> dict[str, float]:
        """Mean, p95 and max latency over every processed record (NaN when nothing was processed); with
        `before` (an earlier `histogram`), over the records processed since."""
        hist = self._hist[: self._max_delay_s + 1].copy()
        if before is not None:
            hist[: len(before)] -= before
        hist = hist[: int(np.flatnonzero(hist)[-1]) + 1] if hist.any() else hist[:0]
        total = int(hist.sum())
        if total == 0:
            nan = float("nan")
            return {"mean_latency_s": nan, "p95_latency_s": nan, "max_latency_s": nan}
        delays = np.arange(len(hist))
        cumulative = np.cumsum(hist)
        p95_delay = int(np.searchsorted(cumulative, 0.95 * total, side="left"))
        return {
            "mean_latency_s": float((hist * delays).sum() / total) + self.base_latency_s,
            "p95_latency_s": p95_delay + self.base_latency_s,
            "max_latency_s": len(hist) - 1 + self.base_latency_s,
        }
