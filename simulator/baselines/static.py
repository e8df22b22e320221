"""The static baseline: one fixed scale-out for the whole run, sized for the peak (the paper's 12 workers)."""

from __future__ import annotations

from mape.knowledge import Knowledge
from messages.types import Assessment


class StaticPolicy:
    name = "static"

    def __init__(self, scaleout: int) -> None:
        self.scaleout = scaleout

    def propose(self, assessment: Assessment, knowledge: Knowledge) -> tuple[int, str, tuple[str, ...]]:
        return self.scaleout, "static", (f"fixed scale-out {self.scaleout}",)
