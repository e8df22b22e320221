"""Plan: the policy interface and the guards every policy shares.

A policy proposes a scale-out from an Assessment; `GuardedPlan` wraps it with the rules that hold for
all of them: no decision on bad data, no action during stabilization, min/max bounds. A memory-aware
policy proposes a whole configuration (scale-out and managed memory per slot, or every vertex's
parallelism and the TaskManagers that carry them); the guards are the same, and a guard that holds keeps
the configuration as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from mape.knowledge import Knowledge
from messages.types import Assessment, Decision


class Policy(Protocol):
    """Proposes a target scale-out; returns it with the rule that decided it and the reasons."""

    name: str

    def propose(self, assessment: Assessment, knowledge: Knowledge) -> tuple[int, str, tuple[str, ...]]: ...


@dataclass(frozen=True)
class Proposal:
    """A configuration a memory-aware policy proposes; `managed_mb` None leaves the memory as it is."""

    scaleout: int
    rule: str
    reasons: tuple[str, ...] = ()
    managed_mb: float | None = None
    memory_level: int | None = None
    vertex_parallelism: dict[str, int] | None = None
    """Per-vertex granularity: vertex id → parallelism; `scaleout` then counts the TaskManagers."""
    vertex_rules: dict[str, str] | None = None
    current_vertex_parallelism: dict[str, int] | None = None
    current_taskmanagers: int | None = None
    """Per-vertex granularity: the TaskManagers the running parallelism needs, what `scaleout` is compared
    with (the assessment's scale-out is the widest vertex's: with 2 slots per TaskManager a plan that kept
    every vertex read as a scale-in and went out as a whole-job `scale_to`)."""


@runtime_checkable
class ConfigurationPolicy(Protocol):
    """A policy that decides memory as well as the scale-out."""

    name: str

    def propose_configuration(self, assessment: Assessment, knowledge: Knowledge) -> Proposal: ...


class GuardedPlan:
    """Applies the shared guards around a policy."""

    def __init__(self, policy: Policy, min_scaleout: int, max_scaleout: int, stabilization_s: float) -> None:
        self.policy = policy
        self.min_scaleout = min_scaleout
        self.max_scaleout = max_scaleout
        self.stabilization_s = stabilization_s

    def decide(self, assessment: Assessment, knowledge: Knowledge) -> Decision:
        now_s, current = assessment.time_s, assessment.current_scaleout

        current_mb = assessment.memory.managed_mb if assessment.memory is not None else None

        def decision(target: int, rule: str, *reasons: str, managed_mb=None, level=None) -> Decision:
            return Decision(now_s, current, target, rule, tuple(reasons), current_mb, managed_mb, level)

        if assessment.problems:
            return decision(current, "hold-bad-data", *assessment.problems)
        since = None if knowledge.last_rescale_s is None else now_s - knowledge.last_rescale_s
        if since is not None and since < self.stabilization_s:
            urgent = getattr(self.policy, "urgent", None)
            surge = urgent(assessment, knowledge) if urgent is not None else None
            if surge is None:
                return decision(
                    current, "stabilization", f"last rescale {since:.0f} s ago < {self.stabilization_s:.0f} s"
                )
            # a surge does not wait: stabilization guards against flapping, not load
            proposal = surge if isinstance(surge, Proposal) else Proposal(*surge)
            inside = f"inside stabilization ({since:.0f} s after a rescale)"
            proposal = replace(proposal, reasons=(*proposal.reasons, inside))
        elif isinstance(self.policy, ConfigurationPolicy):
            proposal = self.policy.propose_configuration(assessment, knowledge)
        else:
            proposal = Proposal(*self.policy.propose(assessment, knowledge))
        target, reasons = proposal.scaleout, proposal.reasons
        bounded = self._bounded(target)
        if bounded != target:
            reasons = (*reasons, f"{target} clamped to [{self.min_scaleout}, {self.max_scaleout}]")
        made = decision(
            bounded, proposal.rule, *reasons, managed_mb=proposal.managed_mb, level=proposal.memory_level
        )
        if proposal.vertex_parallelism is None:
            return made
        return replace(
            made,
            current_scaleout=proposal.current_taskmanagers or made.current_scaleout,
            target_vertex_parallelism=dict(proposal.vertex_parallelism),
            current_vertex_parallelism=dict(proposal.current_vertex_parallelism or {}),
            vertex_rules=dict(proposal.vertex_rules or {}),
        )

    def _bounded(self, scaleout: int) -> int:
        return min(max(scaleout, self.min_scaleout), self.max_scaleout)
