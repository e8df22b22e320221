"""The Flink Kubernetes Operator autoscaler's rule (module flink-autoscaler), for a job that is one vertex.

Its defaults (job.autoscaler.*): utilization.target 0.7 with target.utilization.boundary 0.3, restart.time
5 min, catch-up.duration 30 min, metrics.window 15 min, stabilization.interval 5 min, scale-down.interval
1 h, scale-down.max-factor 0.6, scale-up.max-factor 100000, backlog-processing.lag-threshold 5 min,
metrics.busy-time.aggregator MAX. Every loop (its reconcile interval, 60 s):

1. no metrics are collected for `stabilization.interval` after a rescale, and nothing is decided until a
   full `metrics.window` of samples exists (so a decision comes ≥ 20 min after the last rescale);
2. true processing rate TPR = average processed rate / average busy ratio of the busiest worker (the MAX
   aggregator, which makes it skew-aware);
3. target capacity at utilization u = lag / catch-up + rate × restart / catch-up + rate / u, with the
   average input rate; the scale-up threshold uses u = target + boundary without the restart term, the
   scale-down threshold u = target − boundary with it (while the backlog exceeds the lag threshold: 1.0
   and 0, i.e. no scale-down). A rescale happens only when TPR lies outside the band;
4. new parallelism = ceil(current × target capacity(0.7) / TPR), the factor capped to
   [1 − max scale-down factor, 1 + max scale-up factor];
5. a scale-down waits `scale-down.interval` from its first trigger, then applies the highest parallelism
   recommended within that interval; a scale-up or an unchanged recommendation cancels it.

Left out: key-group alignment of the parallelism (the twin's workers are whole TaskManagers; aligning to
divisors of 128 key groups would leave only 1, 2, 4, 8, 16), memory tuning, ineffective-scaling
detection (off by default), and the observed true processing rate used while catching up
(`ScalingMetricEvaluator.selectTprMetric`, for sources, whose busy time Flink reports poorly; the twin's is
exact).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from mape.knowledge import Knowledge
from messages.types import Assessment


@dataclass(frozen=True)
class OperatorSettings:
    target_utilization: float = 0.7
    utilization_boundary: float = 0.3
    restart_time_s: float = 300.0
    catch_up_duration_s: float = 1800.0
    metrics_window_s: float = 900.0
    stabilization_interval_s: float = 300.0
    scale_down_interval_s: float = 3600.0
    scale_down_max_factor: float = 0.6
    scale_up_max_factor: float = 100000.0
    backlog_lag_threshold_s: float = 300.0


@dataclass(frozen=True)
class _Sample:
    time_s: float
    input_rps: float
    processed_rps: float
    busy_max: float


def target_capacity_rps(
    input_rps: float, lag_records: float, utilization: float, with_restart: bool, settings: OperatorSettings
) -> float:
    """Processing capacity the job needs to run at `utilization` and to work off its lag (and a restart's
    backlog) within the catch-up duration."""
    if utilization <= 0:
        return math.inf
    catch_up_s = settings.catch_up_duration_s
    lag_rate = lag_records / catch_up_s if catch_up_s > 0 else 0.0
    restart_rate = (
        input_rps * settings.restart_time_s / catch_up_s if with_restart and catch_up_s > 0 else 0.0
    )
    return lag_rate + restart_rate + input_rps / min(utilization, 1.0)


class FlinkOperatorPolicy:
    """Keeps the operator's metric window and delayed scale-downs in memory (not persisted)."""

    name = "flink-operator"
    own_stabilization = True  # stabilization interval + full metric window replace the shared guard

    def __init__(
        self, min_scaleout: int, max_scaleout: int, settings: OperatorSettings | None = None
    ) -> None:
        self.min_scaleout = min_scaleout
        self.max_scaleout = max_scaleout
        self.settings = settings or OperatorSettings()
        self._samples: deque[_Sample] = deque()
        self._epoch_s: float | None = None  # start of the current deployment's collection
        self._scale_downs: list[tuple[float, int, bool]] = []  # (time, recommended, outside the band)

    def propose(self, assessment: Assessment, knowledge: Knowledge) -> tuple[int, str, tuple[str, ...]]:
        a, s = assessment, self.settings
        current = a.current_scaleout
        epoch_s = knowledge.last_rescale_s if knowledge.last_rescale_s is not None else self._epoch_s
        if epoch_s is None:
            epoch_s = a.time_s  # first sight of the job
        if epoch_s != self._epoch_s:  # a new deployment: its metrics and pending scale-downs start afresh
            self._epoch_s, self._samples, self._scale_downs = epoch_s, deque(), []
        collect_from_s = epoch_s + s.stabilization_interval_s
        if a.time_s < collect_from_s:
            return current, "operator-stabilizing", (f"no metrics collected before {collect_from_s:.0f} s",)
        busy = [b for b in a.worker_busy_ratio if math.isfinite(b)]
        if busy and a.worker_throughput_rps:
            self._samples.append(
                _Sample(a.time_s, a.workload_avg_rps, sum(a.worker_throughput_rps), max(busy))
            )
        while self._samples and self._samples[0].time_s <= a.time_s - s.metrics_window_s:
            self._samples.popleft()
        if a.time_s - collect_from_s < s.metrics_window_s or not self._samples:
            return current, "operator-collecting", (f"metric window of {s.metrics_window_s:.0f} s not full",)

        samples = self._samples
        input_rps = sum(x.input_rps for x in samples) / len(samples)
        busy_avg = sum(x.busy_max for x in samples) / len(samples)
        processed_rps = sum(x.processed_rps for x in samples) / len(samples)
        if busy_avg <= 0:
            return current, "operator-hold", ("no busy time: true processing rate unknown",)
        tpr = processed_rps / busy_avg
        lag = a.backlog_records
        backlog = input_rps > 0 and lag / input_rps > s.backlog_lag_threshold_s
        upper = 1.0 if backlog else s.target_utilization + s.utilization_boundary
        lower = 0.0 if backlog else s.target_utilization - s.utilization_boundary
        up_threshold = target_capacity_rps(input_rps, lag, upper, False, s)
        down_threshold = target_capacity_rps(input_rps, lag, lower, True, s)
        target = target_capacity_rps(input_rps, lag, s.target_utilization, True, s)
        factor = min(max(target / tpr, 1 - s.scale_down_max_factor), 1 + s.scale_up_max_factor)
        wanted = min(max(math.ceil(factor * current), self.min_scaleout), self.max_scaleout)
        outside = tpr < up_threshold or tpr > down_threshold
        reasons = (
            f"TPR {tpr:.0f} rps (rate {processed_rps:.0f} / busiest {busy_avg:.2f}), band "
            f"[{up_threshold:.0f}, {down_threshold:.0f}] rps{' (processing backlog)' if backlog else ''}",
            f"target capacity {target:.0f} rps → factor {factor:.3f} → {wanted}",
        )
        if wanted >= current:
            self._scale_downs = []
            if wanted > current and outside:
                return wanted, "operator-scale-up", reasons
            return current, "operator-within-band" if wanted > current else "operator-hold", reasons
        return self._delayed_scale_down(a.time_s, current, wanted, outside, reasons)

    def _delayed_scale_down(
        self, now_s: float, current: int, wanted: int, outside: bool, reasons: tuple[str, ...]
    ) -> tuple[int, str, tuple[str, ...]]:
        interval_s = self.settings.scale_down_interval_s
        self._scale_downs.append((now_s, wanted, outside))
        first_s = self._scale_downs[0][0]
        if interval_s > 0 and now_s - first_s < interval_s:
            return current, "operator-scale-down-delayed", (*reasons, f"first wanted at {first_s:.0f} s")
        recent = [(n, out) for t, n, out in self._scale_downs if t >= now_s - interval_s]
        chosen, chosen_outside = max(recent)
        if not chosen_outside:
            return current, "operator-within-band", reasons
        return chosen, "operator-scale-down", (*reasons, f"highest recommendation of the interval: {chosen}")
