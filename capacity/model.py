"""Skew-aware capacity of the job at every scale-out, learned online from per-worker CPU and throughput.

Skew model (our choice, documented): key skew fixes each worker's *share* of the records, so when the
load rises every worker's throughput rises in proportion, and the job saturates when its first worker
reaches the saturation CPU S. On each worker's CPU→throughput line, the load factor at which worker i
saturates is k_i = line_i(S) / throughput_i; the job's capacity is min_i(k_i) × Σ throughput_i. The
throughput is an exact count; the line is fitted over the worker's whole history, so neither carries the
noise of one window's CPU gauge into the minimum. This is
the paper's "proportional to the worker with the highest CPU", done in throughput space so that the idle
CPU floor of a JVM (≈0.11 in the recorded ramp) does not distort it (neither the authors' additive
1 − (cpu_max − cpu_i) nor CPU ratios account for it).

Lines: the slope dthroughput/dCPU comes from regressing CPU on throughput, not throughput on CPU as in
the paper. The throughput is an exact count and the CPU gauge is the noisy variable, and a regression on
a noisy regressor is attenuated by var(true CPU) / var(observed CPU). At low load the CPU barely moves
above the JVM's idle floor, so that factor collapses: on the YSB trace the paper's direction put the
capacity of 12 workers at 4% of the truth from the first hour's windows, and every plan built on it was
wrong for hours. The reverse direction has no such bias; it costs little where the CPU spread is wide (the
recorded single-worker ramp below 80% CPU predicts saturation 5.2% high against the paper's 4.3%; the
real Flink cluster of the end-to-end tests within 4%). A worker whose own data do not determine its
line (few points, little CPU spread, weak t) uses the pooled within-worker slope (first over this
scale-out's lines, then over all, including retired ones, so knowledge survives pod churn after a rescale),
else the line through the idle point (idle_cpu, 0) and its means.

Lines are kept per (worker, scale-out), because a worker's CPU per counted record changes with the
scale-out in most real jobs: its throughput is counted at the evenly fed source while its CPU follows the
key groups its keyed subtask holds at that scale-out, and a keyed operator's cost per record can depend on
the parallelism (a session window's state per subtask shrinks as subtasks are added). A line pooled over
scale-outs carries one scale-out's relation into another: on the twin (YSB trace) the median error at the
current scale-out was 10.7% pooled vs 1.9% per scale-out for `session`, 5.4–8.1% vs 2.7% for `hot-key`
(traffic trace). The price is fewer points per line where the relation does not change (`single`, whose
throughput is counted at the keyed operator itself: 0.8–1.0% pooled, 1.5–3.5% per scale-out for the
job-level model alone).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

import numpy as np

from capacity.regression import RegressionStats
from capacity.rows import RowGroups, stacked
from config.schema import FLINK_MAX_PARALLELISM
from messages.types import MAX_RATE_RPS, WorkerSeries

MAX_CPU = 16.0
"""Above any CPU load a worker reports (a 0..1 gauge per core, the plausibility check allows 2× its cores):
the bound stored sums are judged by."""


@dataclass(frozen=True)
class CapacitySettings:
    """Knobs of the capacity model (defaults documented in config/schema.py)."""

    saturation_cpu: float = 0.95
    idle_cpu: float = 0.11
    min_points: int = 6
    min_slope_t: float = 10.0
    min_cpu_std: float = 0.05
    warmup_s: float = 120.0
    observed_smoothing: float = 0.3
    estimate_min_cpu: float = 0.4
    worker_retention_s: float = 3600.0


@dataclass(frozen=True)
class WorkerWindow:
    """A worker's valid samples in this loop window, reduced to what the model needs."""

    worker_id: str
    stats: RegressionStats
    cpu_mean: float
    throughput_mean_rps: float


@dataclass(frozen=True)
class CapacityEstimate:
    """Capacity per scale-out; `current_rps` is None when the current deployment gave no usable data."""

    current_scaleout: int
    current_rps: float | None
    per_worker_rps: dict[str, float]
    per_scaleout_rps: dict[int, float]
    sources: dict[int, str]
    method: str


def line_key(worker_id: str, scaleout: int | None) -> str:
    """The key a worker's line at a scale-out is kept under (the worker's id alone without a scale-out)."""
    return worker_id if scaleout is None else f"{worker_id}@{scaleout}"


@dataclass
class _WorkerKnowledge:
    stats: RegressionStats = field(default_factory=RegressionStats)
    last_seen_s: float = 0.0


SEEDED_AT_S = 0.0
"""When a capacity plan's capacities count as observed (daemon/plan_output.py): before any loop time, so
every estimate of the daemon's own is newer, and an entry still at this time was never estimated here."""


@dataclass
class _ScaleoutKnowledge:
    capacity_rps: float
    updated_s: float
    estimates: int = 1
    reliable: bool = True


def valid_windows(
    workers: tuple[WorkerSeries, ...],
    uptime_s: float | None,
    now_s: float,
    warmup_s: float,
    max_cpu: float = MAX_CPU,
) -> list[WorkerWindow]:
    """Drop NaN samples, samples from the warm-up after the job (re)started and CPU samples above
    `max_cpu` (one bogus scrape moved a worker's line for good); summarise the rest.

    Workers whose series have one length (the usual case) are summarised together (capacity/rows.py).
    """
    started_s = now_s - uptime_s if uptime_s is not None and math.isfinite(uptime_s) else -math.inf
    timestamps = stacked([w.timestamps_s for w in workers])
    if timestamps is None:
        windows = (_valid_window(worker, started_s + warmup_s, max_cpu) for worker in workers)
        return [w for w in windows if w]
    cpu = stacked([w.cpu for w in workers])
    tput = stacked([w.throughput_rps for w in workers])
    keep = (
        np.isfinite(cpu)
        & np.isfinite(tput)
        & (timestamps >= started_s + warmup_s)
        & (cpu >= 0)
        & (cpu <= max_cpu)
        & (tput >= 0)
    )
    rows = RowGroups(keep)
    stats, cpu_mean, tput_mean = (
        rows.regressions(cpu, tput),
        rows.means(cpu).tolist(),
        rows.means(tput).tolist(),
    )
    return [
        WorkerWindow(worker.worker_id, stats[i], cpu_mean[i], tput_mean[i])
        for i, worker in enumerate(workers)
        if rows.counts[i]
    ]


def _valid_window(worker: WorkerSeries, from_s: float, max_cpu: float) -> WorkerWindow | None:
    """One worker's window: its finite, non-negative samples from `from_s` on (None without any)."""
    keep = (
        np.isfinite(worker.cpu)
        & np.isfinite(worker.throughput_rps)
        & (worker.timestamps_s >= from_s)
        & (worker.cpu >= 0)
        & (worker.cpu <= max_cpu)
        & (worker.throughput_rps >= 0)
    )
    if not keep.any():
        return None
    cpu, tput = worker.cpu[keep], worker.throughput_rps[keep]
    return WorkerWindow(
        worker.worker_id, RegressionStats.from_arrays(cpu, tput), float(cpu.mean()), float(tput.mean())
    )


class CapacityModel:
    """Per-worker regressions plus per-scale-out capacities seen so far (the capacity knowledge)."""

    def __init__(self, settings: CapacitySettings | None = None) -> None:
        self.settings = settings or CapacitySettings()
        self.workers: dict[str, _WorkerKnowledge] = {}
        self.retired_n = 0
        self.retired_m2_x = 0.0
        self.retired_m2_y = 0.0
        self.retired_c_xy = 0.0
        self.observed: dict[int, _ScaleoutKnowledge] = {}

    # ---- learning -------------------------------------------------------------------------------
    def learn(
        self, windows: list[WorkerWindow], now_s: float, scaleout: int, saturated: bool = False
    ) -> None:
        """Merge this window's samples into each worker's line at this scale-out; retire lines long unused.

        Samples of a saturated job are not learned: its throughput is pinned by the hottest worker, so
        the other workers' CPU moves without throughput and would flatten their lines.
        """
        for window in windows:
            known = self.workers.setdefault(line_key(window.worker_id, scaleout), _WorkerKnowledge())
            if not saturated:
                known.stats = known.stats.merge(window.stats)
            known.last_seen_s = now_s
        for worker_id in [
            w for w, k in self.workers.items() if now_s - k.last_seen_s > self.settings.worker_retention_s
        ]:
            gone = self.workers.pop(worker_id).stats
            self.retired_n += gone.n
            self.retired_m2_x += gone.m2_x
            self.retired_m2_y += gone.m2_y
            self.retired_c_xy += gone.c_xy

    def pooled_slope(self, scaleout: int | None = None) -> float:
        """Within-worker slope over the lines of this scale-out where they determine one, else over all lines
        ever seen (robust to per-worker offsets); NaN if weak."""
        if scaleout is not None:
            suffix = line_key("", scaleout)
            mine = [k.stats for key, k in self.workers.items() if key.endswith(suffix)]
            slope = self._pooled(mine, 0, 0.0, 0.0, 0.0)
            if math.isfinite(slope):
                return slope
        stats = [k.stats for k in self.workers.values()]
        return self._pooled(stats, self.retired_n, self.retired_m2_x, self.retired_m2_y, self.retired_c_xy)

    def _pooled(self, stats: list[RegressionStats], n: int, m2_x: float, m2_y: float, c_xy: float) -> float:
        pooled = RegressionStats(
            n=n + sum(s.n for s in stats),
            m2_x=m2_x + sum(s.m2_x for s in stats),
            m2_y=m2_y + sum(s.m2_y for s in stats),
            c_xy=c_xy + sum(s.c_xy for s in stats),
        )
        return pooled.reverse_slope if pooled.slope_t >= self.settings.min_slope_t else math.nan

    def worker_slope(self, stats: RegressionStats, pooled: float) -> float:
        """The worker's own slope where its data determine it, else the pooled slope, else the line through
        the idle point (idle_cpu, 0) and the worker's means."""
        determined = (
            stats.n >= self.settings.min_points
            and stats.var_x >= self.settings.min_cpu_std**2
            and stats.slope_t >= self.settings.min_slope_t
        )
        if determined:
            return stats.reverse_slope
        if math.isfinite(pooled):
            return pooled
        span = stats.mean_x - self.settings.idle_cpu
        return stats.mean_y / span if span >= 0.1 else math.nan

    def worker_line_at(self, worker_id: str, cpu: float, pooled: float) -> float:
        """Throughput of a worker at `cpu` on its line through its own means; NaN when unknown."""
        stats = self.workers.get(worker_id, _WorkerKnowledge()).stats
        if stats.n == 0:
            return math.nan
        slope = self.worker_slope(stats, pooled)
        if not slope > 0:
            return math.nan
        return stats.mean_y + slope * (cpu - stats.mean_x)

    def lines_at(self, worker_ids: list[str], cpu: float, pooled: float) -> np.ndarray:
        """`worker_line_at` of many workers at once: the same arithmetic, elementwise (x**2 as C's pow, as
        Python computes it, so that every value equals the scalar one to the last bit)."""
        empty = RegressionStats()
        fields = np.array(
            [
                (s.n, s.mean_x, s.mean_y, s.m2_x, s.m2_y, s.c_xy)
                for s in (self.workers[w].stats if w in self.workers else empty for w in worker_ids)
            ],
            dtype=float,
        ).reshape(-1, 6)
        n, mean_x, mean_y, m2_x, m2_y, c_xy = fields.T
        settings = self.settings
        with np.errstate(all="ignore"):
            var_x = np.where(n > 0, m2_x / n, np.nan)
            residual = np.maximum(m2_y - np.float_power(c_xy, 2) / m2_x, 0.0) / (n - 2)
            slope_t = np.where(
                (n >= 3) & (m2_x > 0),
                np.where(
                    residual == 0,
                    np.where(c_xy != 0, np.inf, 0.0),
                    (c_xy / m2_x) / np.sqrt(residual / m2_x),
                ),
                0.0,
            )
            determined = (
                (n >= settings.min_points)
                & (var_x >= settings.min_cpu_std**2)
                & (slope_t >= settings.min_slope_t)
            )
            span = mean_x - settings.idle_cpu
            fallback = pooled if math.isfinite(pooled) else np.where(span >= 0.1, mean_y / span, np.nan)
            slope = np.where(determined, np.where(c_xy > 0, m2_y / c_xy, np.nan), fallback)
            return np.where((n > 0) & (slope > 0), mean_y + slope * (cpu - mean_x), np.nan)

    def current_capacity(
        self, windows: list[WorkerWindow], scaleout: int
    ) -> tuple[float | None, dict[str, float], str]:
        """Skew-aware capacity of the deployment seen in this window (see module docstring)."""
        if not windows:
            return None, {}, "no-data"
        saturation = max(self.settings.saturation_cpu, max(w.cpu_mean for w in windows))
        keys = [line_key(w.worker_id, scaleout) for w in windows]
        at_saturation = self.lines_at(keys, saturation, self.pooled_slope(scaleout))
        throughputs = np.array([w.throughput_mean_rps for w in windows])
        usable = (throughputs > 0) & np.isfinite(at_saturation) & (at_saturation > 0)
        if not usable.any():
            return None, {}, "unknown-lines"
        load_factor = float((at_saturation[usable] / throughputs[usable]).min())
        per_worker = {w.worker_id: load_factor * w.throughput_mean_rps for w in windows}
        method = "regression" if usable.all() else "regression-partial"
        return float(sum(per_worker.values())), per_worker, method

    def estimate(
        self,
        windows: list[WorkerWindow],
        current_scaleout: int,
        max_scaleout: int,
        now_s: float,
        saturated: bool = False,
    ) -> CapacityEstimate:
        """Capacity for every scale-out 1..max; remembers the current one as 'observed'.

        Unseen scale-outs, and seen ones known only from low-load estimates while a reliable one exists,
        come from the reliably observed ones: interpolated between the nearest below and above (skew makes
        capacity grow less than linearly in the workers), else extrapolated with the average worker of the
        nearest one.

        A saturated job (backlog it cannot drain) shows its capacity directly as its throughput.
        """
        if saturated and windows:
            per_worker = {w.worker_id: w.throughput_mean_rps for w in windows}
            current_rps, method = float(sum(per_worker.values())), "saturated"
        else:
            current_rps, per_worker, method = self.current_capacity(windows, current_scaleout)
        if current_rps is not None and len(windows) < current_scaleout:
            # Workers without data this window: assume they carry the average worker's share.
            current_rps *= current_scaleout / len(windows)
        if current_rps is not None:
            current_rps, method = self._remember(
                current_scaleout, current_rps, now_s, max(w.cpu_mean for w in windows), method
            )
        per_scaleout: dict[int, float] = {}
        sources: dict[int, str] = {}
        trusted = sorted({n for n, seen in self.observed.items() if seen.reliable} or set(self.observed))
        for scaleout in range(1, max_scaleout + 1):
            at = bisect.bisect_left(trusted, scaleout)  # trusted[at - 1] < scaleout <= trusted[at]
            if at < len(trusted) and trusted[at] == scaleout:
                per_scaleout[scaleout], sources[scaleout] = self.observed[scaleout].capacity_rps, "observed"
                continue
            below = trusted[at - 1] if at > 0 else None
            above = trusted[at] if at < len(trusted) else None
            if below is not None and above is not None:
                low, high = self.observed[below].capacity_rps, self.observed[above].capacity_rps
                share = (scaleout - below) / (above - below)
                per_scaleout[scaleout], sources[scaleout] = low + share * (high - low), "interpolated"
                continue
            nearest = below if above is None else above
            if nearest is not None:
                per_worker_rps = self.observed[nearest].capacity_rps / nearest
                per_scaleout[scaleout], sources[scaleout] = per_worker_rps * scaleout, "extrapolated"
        if current_rps is not None:
            per_scaleout[current_scaleout] = current_rps
        return CapacityEstimate(current_scaleout, current_rps, per_worker, per_scaleout, sources, method)

    def _remember(
        self, scaleout: int, capacity_rps: float, now_s: float, hottest_cpu: float, method: str
    ) -> tuple[float, str]:
        """Keep the estimate as knowledge; at low load, lines extrapolate far and knowledge wins. A
        saturated job's throughput is its capacity measured, at any CPU (a sink waiting on a store
        saturates at 30%: its first windows, still rising, were remembered for good).

        Returns the capacity to use for the current scale-out and how it was obtained.
        """
        reliable = method == "saturated" or hottest_cpu >= self.settings.estimate_min_cpu
        seen = self.observed.get(scaleout)
        if seen is not None and seen.reliable and not reliable:
            return seen.capacity_rps, "remembered-low-load"
        if seen is None or (reliable and not seen.reliable):
            self.observed[scaleout] = _ScaleoutKnowledge(capacity_rps, now_s, reliable=reliable)
        else:
            alpha = self.settings.observed_smoothing
            seen.capacity_rps = (1 - alpha) * seen.capacity_rps + alpha * capacity_rps
            seen.updated_s = now_s
            seen.estimates += 1
        return capacity_rps, method if reliable else f"{method}-low-load"

    def seed(self, capacities_rps: dict[int, float], at_s: float = SEEDED_AT_S) -> int:
        """Take capacities known from elsewhere (a capacity plan's testbed) as reliable observations at every
        scale-out not observed yet; the model's own reliable estimates smooth them in later. Returns how
        many were taken."""
        fresh = {n: c for n, c in capacities_rps.items() if n not in self.observed}
        self.observed.update((n, _ScaleoutKnowledge(c, at_s)) for n, c in fresh.items())
        return len(fresh)

    def forget_seeded(self) -> int:
        """Drop the seeded capacities no estimate of this model has touched yet (still at `SEEDED_AT_S`):
        they turned out to be another job's. Returns how many."""
        seeded = [n for n, known in self.observed.items() if known.updated_s == SEEDED_AT_S]
        for n in seeded:
            del self.observed[n]
        return len(seeded)

    # ---- persistence ----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "workers": {
                w: {"stats": k.stats.to_dict(), "last_seen_s": k.last_seen_s} for w, k in self.workers.items()
            },
            "retired": {
                "n": self.retired_n,
                "m2_x": self.retired_m2_x,
                "m2_y": self.retired_m2_y,
                "c_xy": self.retired_c_xy,
            },
            "observed": {
                str(n): {
                    "capacity_rps": k.capacity_rps,
                    "updated_s": k.updated_s,
                    "estimates": k.estimates,
                    "reliable": k.reliable,
                }
                for n, k in self.observed.items()
            },
        }

    @classmethod
    def from_dict(cls, data: dict, settings: CapacitySettings | None = None) -> CapacityModel:
        """The model `to_dict` wrote; ValueError for a capacity no window can give (10^300 at one worker
        took the job to 1 and back to 18): the knowledge starts this part fresh. A worker's line whose
        sums no windows give is dropped alone."""
        model = cls(settings)
        for worker_id, known in data.get("workers", {}).items():
            stats = RegressionStats.from_dict(known["stats"])
            if stats.within(MAX_CPU, MAX_RATE_RPS):  # a line no windows give is dropped alone
                model.workers[worker_id] = _WorkerKnowledge(stats, float(known["last_seen_s"]))
        retired = data.get("retired", {})
        model.retired_n = int(retired.get("n", 0))
        model.retired_m2_x = float(retired.get("m2_x", 0.0))
        model.retired_m2_y = float(retired.get("m2_y", 0.0))
        model.retired_c_xy = float(retired.get("c_xy", 0.0))
        for n, seen in data.get("observed", {}).items():
            known = _ScaleoutKnowledge(
                float(seen["capacity_rps"]),
                float(seen["updated_s"]),
                int(seen["estimates"]),
                bool(seen["reliable"]),
            )
            if not (1 <= int(n) <= FLINK_MAX_PARALLELISM and 0 <= known.capacity_rps <= MAX_RATE_RPS):
                raise ValueError(f"a capacity of {known.capacity_rps} rps at scale-out {n}")
            model.observed[int(n)] = known
        return model
