"""DS2 per operator (Kalavri et al., OSDI'18), the baseline at vertex granularity.

- Model (§3.2, Eq. 1–8): an instance's true processing rate is the records it processes per second of
  useful (busy) time; an operator's optimal parallelism is ⌈its target input rate / the average true rate
  per instance⌉, where the target input rate comes from walking the graph from the sources: a source's
  output is the observed source rate (× the target-rate ratio), every other operator's input is the sum
  of its upstream targets × their observed selectivity (records out / in).
- Knobs (§4.2 "Scaling Manager"): the *policy interval* (decision interval: the loop interval), the
  *warm-up* (policy intervals ignored after a scaling action), the *activation time* (consecutive policy
  decisions considered before a rescale, applying the highest parallelism per operator among them), the
  *target rate ratio* (here the multiple of the observed source rate to provision for, as in the job-level
  baseline), and *minor changes ignored* (§4.2: changing an operator by one or two, triggered by noisy
  metrics). The *scaling factor* multiplies each computed parallelism (1.0: the exact model; the knob of
  the released implementation's over-provisioning, swept in the evaluation).
- DS2 assumes no skew (§3.3): it averages the instances' true rates. An operator whose busy time Flink
  does not report (a legacy source) keeps its parallelism. All changed operators go in one rescale.
"""

from __future__ import annotations

import math

from mape.knowledge import Knowledge
from mape.plan import Proposal
from messages.types import Assessment
from simulator.baselines.ds2 import BEHIND_S
from simulator.baselines.vertex_common import bounded, hold, running, vertex_proposal


class Ds2VertexPolicy:
    """DS2's scaling manager around its model; keeps its pending decisions in memory (not persisted)."""

    name = "ds2"
    own_stabilization = True  # DS2's warm-up replaces the shared guard

    def __init__(
        self,
        max_taskmanagers: int,
        slots_per_taskmanager: int = 1,
        target_ratio: float = 1.0,
        activation_intervals: int = 1,
        warmup_intervals: int = 1,
        scaling_factor: float = 1.0,
        min_change: int = 1,
    ) -> None:
        self.max_slots = max_taskmanagers * slots_per_taskmanager
        self.slots_per_taskmanager = slots_per_taskmanager
        self.target_ratio = target_ratio
        self.activation_intervals = activation_intervals
        self.warmup_intervals = warmup_intervals
        self.scaling_factor = scaling_factor
        self.min_change = min_change
        self._rescale_seen: float | None = None
        self._ignored = 0
        self._pending: list[dict[str, int]] = []

    def propose_configuration(self, assessment: Assessment, knowledge: Knowledge) -> Proposal:
        seen = running(knowledge)
        if seen is None:
            return Proposal(assessment.current_scaleout, "ds2-no-graph", ("no job graph yet",))
        state, graph, current = seen
        if knowledge.last_rescale_s != self._rescale_seen:  # a scaling action: warm-up starts afresh
            self._rescale_seen, self._ignored, self._pending = knowledge.last_rescale_s, 0, []
        if self._rescale_seen is not None and self._ignored < self.warmup_intervals:
            self._ignored += 1
            return hold(graph, current, "ds2-warm-up", f"interval {self._ignored} of {self.warmup_intervals}")

        source_rps = assessment.workload_avg_rps * self.target_ratio
        behind = assessment.backlog_records > BEHIND_S * max(assessment.workload_avg_rps, 1.0)
        target_out: dict[str, float] = {}
        optimal: dict[str, int] = {}
        notes = []
        for vertex in graph.vertices:
            vid = vertex.vertex_id
            window = state.window.get(vid)
            inputs = graph.inputs(vid)
            target_in = source_rps if not inputs else sum(target_out.get(e.source_id, 0.0) for e in inputs)
            if window is None or not window.records_in_rps > 0:
                target_out[vid], optimal[vid] = 0.0, current[vid]
                continue
            selectivity = window.records_out_rps / window.records_in_rps
            target_out[vid] = target_in * (selectivity if math.isfinite(selectivity) else 1.0)
            useful = window.busy_mean * window.parallelism
            if not (math.isfinite(useful) and useful > 0):  # no busy time reported: the rate is unknown
                optimal[vid] = current[vid]
                continue
            per_instance_rps = window.records_in_rps / useful
            wanted = self.scaling_factor * target_in / per_instance_rps
            optimal[vid] = bounded(graph, vid, wanted, self.max_slots)
            notes.append(f"{vertex.name}: {target_in:.0f} rps / {per_instance_rps:.0f} per instance")
            if abs(optimal[vid] - current[vid]) <= self.min_change and not behind:
                optimal[vid] = current[vid]

        self._pending = [*self._pending, optimal][-self.activation_intervals :]
        if len(self._pending) < self.activation_intervals:
            return hold(graph, current, "ds2-activating", *notes)
        chosen = {vid: max(decision[vid] for decision in self._pending) for vid in current}
        if chosen == current:
            return hold(graph, current, "ds2-converged", *notes)
        self._pending = []
        rules = {vid: "ds2-true-rate" if p != current[vid] else "keep" for vid, p in chosen.items()}
        return vertex_proposal(
            graph, current, chosen, rules, "ds2-true-rate", tuple(notes), self.slots_per_taskmanager
        )
