"""Plan: the policy interface and the guards every policy shares.

A policy proposes a scale-out from an Assessment; `GuardedPlan` wraps it with the rules that hold for
all of them: no decision on bad data, no action during stabilization, min/max bounds.
"""

from __future__ import annotations

from typing import Protocol

from mape.knowledge import Knowledge
from mape.types import Assessment, Decision


class Policy(Protocol):
    """Proposes a target scale-out; returns it with the rule that decided it and the reasons."""

    name: str

    def propose(self, assessment: Assessment, knowledge: Knowledge) -> tuple[int, str, tuple[str, ...]]: ...


class GuardedPlan:
    """Applies the shared guards around a policy."""

    def __init__(self, policy: Policy, min_scaleout: int, max_scaleout: int, stabilization_s: float) -> None:
        self.policy = policy
        self.min_scaleout = min_scaleout
        self.max_scaleout = max_scaleout
        self.stabilization_s = stabilization_s

    def decide(self, assessment: Assessment, knowledge: Knowledge) -> Decision:
        now_s, current = assessment.time_s, assessment.current_scaleout

        def decision(target: int, rule: str, *reasons: str) -> Decision:
            return Decision(now_s, current, target, rule, tuple(reasons))

        if assessment.problems:
            return decision(current, "hold-bad-data", *assessment.problems)
        since = None if knowledge.last_rescale_s is None else now_s - knowledge.last_rescale_s
        if since is not None and since < self.stabilization_s:
            return decision(
                current, "stabilization", f"last rescale {since:.0f} s ago < {self.stabilization_s:.0f} s"
            )
        target, rule, reasons = self.policy.propose(assessment, knowledge)
        bounded = min(max(target, self.min_scaleout), self.max_scaleout)
        if bounded != target:
            reasons = (*reasons, f"{target} clamped to [{self.min_scaleout}, {self.max_scaleout}]")
        return decision(bounded, rule, *reasons)
