"""The seam through which a higher layer extends the loop's analysis without mape knowing it.

The core analysis learns one capacity model and assesses the job as a whole. An extension (the memory-
aware analysis, memory/analysis.py) plugs in at four points of an iteration: the Analyzer calls the
extensions it was given (daemon/build.py wires them), in order, and the loop calls the same ones after it
executed a decision; neither imports them. What an extension learns lives in `Knowledge.extensions[name]`
(an `ExtensionState`, mape/extension_state.py), saved with the rest of the knowledge and rebuilt by the
factory named in `KnowledgeSettings.extension_factories`, so a restart loses nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from capacity.model import CapacityEstimate, CapacityModel, WorkerWindow
from messages.types import Assessment, Decision, Observation

if TYPE_CHECKING:
    from mape.knowledge import Knowledge


class AnalysisExtension(Protocol):
    """Hooks into one iteration, called in this order."""

    def capacity_model(
        self, observation: Observation, knowledge: Knowledge, current: int
    ) -> CapacityModel | None:
        """Called first in every analysis (it may learn from the observation here): the capacity model to
        learn into and estimate from at the `current` scale-out; None = the core's `knowledge.capacity`."""
        ...

    def refine_estimate(
        self, knowledge: Knowledge, windows: list[WorkerWindow], current: int, estimate: CapacityEstimate
    ) -> CapacityEstimate:
        """The capacity estimate the plan and the recovery prediction use (unchanged: `estimate`)."""
        ...

    def refine(self, observation: Observation, knowledge: Knowledge, assessment: Assessment) -> Assessment:
        """The finished assessment with the extension's fields added (unchanged: `assessment`)."""
        ...

    def after_execute(
        self, assessment: Assessment, decision: Decision, applied: bool, knowledge: Knowledge
    ) -> None:
        """An executed decision (`applied`: its memory change was applied too) for the extension to learn."""
        ...


class ObservingExtension:
    """An extension that only reads: every hook leaves the analysis as it is. Subclasses override `refine`
    (and whatever else they need)."""

    def capacity_model(
        self, observation: Observation, knowledge: Knowledge, current: int
    ) -> CapacityModel | None:
        return None

    def refine_estimate(
        self, knowledge: Knowledge, windows: list[WorkerWindow], current: int, estimate: CapacityEstimate
    ) -> CapacityEstimate:
        return estimate

    def refine(self, observation: Observation, knowledge: Knowledge, assessment: Assessment) -> Assessment:
        return assessment

    def after_execute(
        self, assessment: Assessment, decision: Decision, applied: bool, knowledge: Knowledge
    ) -> None:
        return None
