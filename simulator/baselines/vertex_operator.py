"""The Flink Kubernetes Operator autoscaler per vertex, the baseline at vertex granularity.

Source: apache/flink-kubernetes-operator, module flink-autoscaler, package org.apache.flink.autoscaler
(release 1.15; docs: per-vertex.md). Every reconcile (the loop interval, 60 s):

1. Collection (`ScalingMetricCollector`): nothing for `stabilization.interval` (5 min) after a rescale; the
   history is cleared on every restart; a decision needs a full `metrics.window` (15 min).
2. True processing rate per vertex (`ScalingMetricEvaluator`, `ScalingMetrics`): records in per second /
   busy share, busy time aggregated with MAX over the subtasks (`metrics.busy-time.aggregator`), averaged
   over the window. A vertex without busy time (a legacy source) gets no new parallelism
   (`JobVertexScaler.computeScaleTargetParallelism`: "True processing rate is not available").
3. Target data rate (`ScalingMetricEvaluator.computeTargetDataRate`): a source's is its input rate (the
   records arriving: here Kafka's messages-in rate, which includes the lag growth); every other vertex's
   is Σ upstream target × the edge's observed output ratio (records out / in of the upstream vertex). The
   catch-up rate (lag / `catch-up.duration`, 30 min) propagates the same way.
4. Capacity (`AutoScalerUtils.getTargetProcessingCapacity`): catch-up + target × restart time /
   catch-up duration + target / utilization; `utilization.target` 0.7; `restart.time` 5 min.
5. Rescale only when a vertex that changes has its true rate outside the band (`ScalingExecutor.
   computeScalingSummary`: a vertex whose scale-down is delayed does not change; one carried out counts
   with the flag of the recommendation it takes; `target.utilization.boundary` 0.3): below the capacity at utilization 0.7 + 0.3 without the restart
   term, or above the capacity at 0.7 − 0.3 with it; while the lag exceeds
   `backlog-processing.lag-threshold` (5 min of input) the band is [capacity at 1.0, ∞): no scale-down.
6. New parallelism (`JobVertexScaler.scale`): ⌈p × capacity(0.7) / true rate⌉, the factor capped by
   `scale-down.max-factor` 0.6 and `scale-up.max-factor`; within [1, max parallelism]; for a vertex with a
   keyed (HASH) input, the first parallelism up to the max parallelism that divides the key groups
   (EVENLY_SPREAD; on a scale-down only up to the current parallelism), else the smallest one with the
   same largest key-group range, and the current one where that would reverse the direction. Sources
   without a known partition count are not aligned.
7. Delayed scale-down (`DelayedScaleDown`, `JobVertexScaler.applyScaleDownInterval`): a vertex's
   scale-down waits `scale-down.interval` (1 h) from the first time it was requested, then applies the
   highest parallelism recommended within that interval; a scale-up or an unchanged recommendation of the
   vertex clears it.
8. Execution (`ScalingRealizer`, the REST PUT path): every changed vertex in one rescale.

Left out: ineffective-scaling detection (off by default), memory tuning, restart-time tracking (off by
default: the configured restart time is used), the observed true processing rate used while catching up
(`ScalingMetricEvaluator.selectTprMetric`: sources only, where the twin's busy time is exact).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from mape.knowledge import Knowledge
from mape.plan import Proposal
from messages.types import Assessment, JobGraph
from simulator.baselines.flink_operator import OperatorSettings, target_capacity_rps
from simulator.baselines.vertex_common import bounded, hold, running, vertex_proposal


@dataclass(frozen=True)
class _Sample:
    time_s: float
    records_in_rps: float
    records_out_rps: float
    busy: float
    """MAX over the subtasks of the busy share (NaN: the vertex reports none)."""


def aligned(parallelism: int, current: int, key_groups: int, upper: int) -> int:
    """EVENLY_SPREAD key-group alignment (`JobVertexScaler.scale`, 1.15): the first p from `parallelism` up
    that divides the key groups (up to the upper bound; on a scale-down up to the current parallelism),
    else the smallest p with the same largest range; a p that would turn a scale-down into a scale-up, or
    the reverse, keeps the current parallelism."""
    if parallelism == current:
        return parallelism
    scale_up = parallelism > current
    top = min(key_groups, upper) if scale_up else min(current, key_groups, upper)
    for p in range(parallelism, top + 1):
        if key_groups % p == 0:
            return p
    p = parallelism
    while p > 0 and key_groups // p <= key_groups // parallelism:
        p -= 1
    if p > 0 and key_groups % p != 0:
        p += 1
    p = max(p, 1)
    return current if (scale_up and p <= current) or (not scale_up and p >= current) else p


class OperatorVertexPolicy:
    """Keeps the operator's metric history and delayed scale-downs in memory (not persisted)."""

    name = "flink-operator"
    own_stabilization = True

    def __init__(
        self, max_taskmanagers: int, slots_per_taskmanager: int = 1, settings: OperatorSettings | None = None
    ) -> None:
        self.max_slots = max_taskmanagers * slots_per_taskmanager
        self.slots_per_taskmanager = slots_per_taskmanager
        self.settings = settings or OperatorSettings()
        self._epoch_s: float | None = None
        self._samples: dict[str, deque[_Sample]] = {}
        self._sources: deque[tuple[float, float]] = deque()  # (time, input rate)
        self._scale_downs: dict[str, list[tuple[float, int]]] = {}

    def propose_configuration(self, assessment: Assessment, knowledge: Knowledge) -> Proposal:
        a, s = assessment, self.settings
        seen = running(knowledge)
        if seen is None:
            return Proposal(a.current_scaleout, "operator-no-graph", ("no job graph yet",))
        state, graph, current = seen
        epoch_s = knowledge.last_rescale_s if knowledge.last_rescale_s is not None else self._epoch_s
        epoch_s = a.time_s if epoch_s is None else epoch_s
        if epoch_s != self._epoch_s:  # a restart clears the metric history
            self._epoch_s, self._samples, self._sources, self._scale_downs = epoch_s, {}, deque(), {}
        collect_from_s = epoch_s + s.stabilization_interval_s
        if a.time_s < collect_from_s:
            return hold(graph, current, "operator-stabilizing", f"no metrics before {collect_from_s:.0f} s")
        self._collect(a, state.window)
        if a.time_s - collect_from_s < s.metrics_window_s:
            return hold(graph, current, "operator-collecting", f"metric window of {s.metrics_window_s:.0f} s")

        input_rps = _mean(r for _, r in self._sources)
        lag = a.backlog_records
        backlog = input_rps > 0 and lag / input_rps > s.backlog_lag_threshold_s
        targets, catch_ups = self._targets(graph, input_rps, lag)
        outside, wanted, notes = {}, {}, []
        for vertex in graph.vertices:
            vid = vertex.vertex_id
            samples = self._samples.get(vid, ())
            tpr = _rate(samples)
            if not (math.isfinite(tpr) and tpr > 0) or not math.isfinite(targets[vid]):
                wanted[vid] = current[vid]
                continue
            target, lag_rate = targets[vid], catch_ups[vid]
            up = _capacity(
                target, lag_rate, 1.0 if backlog else s.target_utilization + s.utilization_boundary, False, s
            )
            down = _capacity(
                target, lag_rate, 0.0 if backlog else s.target_utilization - s.utilization_boundary, True, s
            )
            outside[vid] = tpr < up or tpr > down
            factor = _capacity(target, lag_rate, s.target_utilization, True, s) / tpr
            factor = min(max(factor, 1 - s.scale_down_max_factor), 1 + s.scale_up_max_factor)
            p = bounded(graph, vid, factor * current[vid], self.max_slots)
            if graph.keyed(vid):
                p = aligned(p, current[vid], vertex.max_parallelism, self.max_slots)
            wanted[vid] = p
            notes.append(
                f"{vertex.name}: TPR {tpr:.0f} rps, band [{up:.0f}, {down:.0f}], factor {factor:.2f}"
            )
        chosen, rules, changed_outside = self._delay_scale_downs(a.time_s, current, wanted, outside)
        if chosen == current:
            delayed = "operator-scale-down-delayed" in rules.values()
            rule = "operator-scale-down-delayed" if delayed else "operator-within-band"
            return vertex_proposal(graph, current, current, rules, rule, tuple(notes))
        # `ScalingExecutor.computeScalingSummary`: only the vertices that change count for the band
        if not changed_outside:
            return hold(graph, current, "operator-within-band", *notes)
        for vid in [v for v in chosen if chosen[v] < current[v]]:  # the scale-downs carried out
            self._scale_downs.pop(vid, None)
        rule = "operator-scale-up" if any(chosen[v] > current[v] for v in current) else "operator-scale-down"
        names = ", ".join(v.name for v in graph.vertices if v.vertex_id in changed_outside)
        notes.insert(0, f"outside the utilization band: {names}")
        return vertex_proposal(graph, current, chosen, rules, rule, tuple(notes), self.slots_per_taskmanager)

    def _collect(self, a: Assessment, window) -> None:
        cutoff = a.time_s - self.settings.metrics_window_s
        self._sources.append((a.time_s, a.workload_avg_rps))
        while self._sources and self._sources[0][0] <= cutoff:
            self._sources.popleft()
        for vid, w in window.items():
            if math.isfinite(w.records_in_rps):
                self._samples.setdefault(vid, deque()).append(
                    _Sample(a.time_s, w.records_in_rps, w.records_out_rps, w.busy_max)
                )
        for samples in self._samples.values():
            while samples and samples[0].time_s <= cutoff:
                samples.popleft()

    def _targets(self, graph: JobGraph, input_rps: float, lag: float) -> tuple[dict, dict]:
        """Target data rate and catch-up rate per vertex, propagated along the edges' output ratios."""
        catch_up_s = self.settings.catch_up_duration_s
        targets: dict[str, float] = {}
        catch_ups: dict[str, float] = {}
        for vertex in graph.vertices:
            vid = vertex.vertex_id
            inputs = graph.inputs(vid)
            if not inputs:
                targets[vid] = input_rps
                catch_ups[vid] = lag / catch_up_s if catch_up_s > 0 else 0.0
                continue
            targets[vid] = catch_ups[vid] = 0.0
            for edge in inputs:
                upstream = self._samples.get(edge.source_id, ())
                ratio = _mean(x.records_out_rps for x in upstream) / _mean(x.records_in_rps for x in upstream)
                ratio = ratio if math.isfinite(ratio) else 1.0
                targets[vid] += targets[edge.source_id] * ratio
                catch_ups[vid] += catch_ups[edge.source_id] * ratio
        return targets, catch_ups

    def _delay_scale_downs(
        self, now_s: float, current: dict[str, int], wanted: dict[str, int], outside: dict[str, bool]
    ) -> tuple[dict[str, int], dict[str, str], set[str]]:
        """Each vertex's change after `applyScaleDownInterval`, its rule, and the changed vertices whose
        change counts as outside the band (a delayed scale-down's: that of its highest recommendation)."""
        interval_s = self.settings.scale_down_interval_s
        chosen, rules, changed_outside = {}, {}, set()
        for vid, p in wanted.items():
            if p >= current[vid]:  # an unchanged recommendation or a scale-up clears the delay
                self._scale_downs.pop(vid, None)
                chosen[vid], rules[vid] = p, "operator-scale-up" if p > current[vid] else "keep"
                if p > current[vid] and outside.get(vid, False):
                    changed_outside.add(vid)
                continue
            requests = self._scale_downs.setdefault(vid, [])
            requests.append((now_s, p, outside.get(vid, False)))
            first_s = requests[0][0]
            if interval_s > 0 and now_s - first_s < interval_s:
                chosen[vid], rules[vid] = current[vid], "operator-scale-down-delayed"
                continue
            recent = [(q, out) for t, q, out in requests if t >= now_s - interval_s] or [(p, outside[vid])]
            highest, flagged = max(recent, key=lambda r: r[0])
            chosen[vid], rules[vid] = highest, "operator-scale-down"
            if flagged:
                changed_outside.add(vid)
        return chosen, rules, changed_outside


def _capacity(
    target: float, lag_rate: float, utilization: float, restart: bool, s: OperatorSettings
) -> float:
    """`target_capacity_rps` with the lag already a rate (lag / catch-up duration)."""
    return target_capacity_rps(target, lag_rate * s.catch_up_duration_s, utilization, restart, s)


def _rate(samples) -> float:
    """The true processing rate over the window: the average input rate / the average busy share
    (`ScalingMetrics.computeTprInputRate` over `computeBusyTimeAvg`), from samples with a busy time."""
    timed = [x for x in samples if math.isfinite(x.busy) and x.busy > 0]
    return _mean(x.records_in_rps for x in timed) / _mean(x.busy for x in timed) if timed else math.nan


def _mean(values) -> float:
    values = [v for v in values if math.isfinite(v)]
    return sum(values) / len(values) if values else math.nan
