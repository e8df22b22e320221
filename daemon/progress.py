"""What a person watching `foresail run` on the twin sees: a progress line, then a readable summary.

The audit log (one JSON event per iteration) is for machines; this goes to stderr. On a terminal the
progress line rewrites itself; in a pipe or a file it is printed at every tenth of the trace.
"""

from __future__ import annotations

import time
from collections import Counter
from functools import cached_property
from itertools import takewhile
from typing import TextIO

from daemon.schedule import virtual_times
from mape.loop import IterationResult


def clock(seconds: float) -> str:
    """Seconds as h:mm:ss."""
    seconds = round(float(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class RunProgress:
    """Counts what the iterations did and shows it while the run goes on."""

    def __init__(self, stream: TextIO, start_s: float, end_s: float, interval_s: float) -> None:
        self.stream = stream
        self.start_s, self.end_s, self.interval_s = start_s, end_s, interval_s
        self.live = stream.isatty()
        self.started = time.perf_counter()
        self.iterations = 0
        """Scheduled iterations (of `total`)."""
        self.surge_iterations = 0
        """Iterations the surge watch ran between the scheduled ones (on a surge, or a first look)."""
        self.rescales = Counter[str]()
        self.rules = Counter[str]()
        self.models = Counter[str]()
        self.scaleouts: list[int] = []
        self.now_s = start_s
        self._next_line_s = start_s
        self._last_draw = 0.0

    @cached_property
    def total(self) -> int:
        """Scheduled iterations to the trace's end, counted on the driver's clock (a division rounded to
        the nearest would promise one more than a trace of 95 s at 60 s runs)."""
        times = (now_s for now_s, _ in virtual_times(self.start_s, self.interval_s, None))
        return sum(1 for _ in takewhile(lambda now_s: now_s <= self.end_s, times))

    def record(self, result: IterationResult, surge: bool = False) -> None:
        if surge:
            self.surge_iterations += 1
        else:
            self.iterations += 1
        self.now_s = result.time_s
        decision, assessment = result.decision, result.assessment
        if decision is not None:
            self.rules[decision.rule] += 1
            if not self.scaleouts:  # what the run started from, even when its first decision changed it
                self.scaleouts.append(decision.current_scaleout)
            self.scaleouts.append(decision.target_scaleout if result.executed else decision.current_scaleout)
            if result.executed:
                self.rescales[decision.action] += 1
        if assessment is not None and assessment.forecast_model:
            self.models[assessment.forecast_model.split("(")[0]] += 1
        self._show()

    def _surges(self) -> str:
        return f" (+{self.surge_iterations} off-schedule)" if self.surge_iterations else ""

    def line(self) -> str:
        workers = self.scaleouts[-1] if self.scaleouts else "?"
        return (
            f"iteration {self.iterations}/{self.total}{self._surges()}  "
            f"trace {clock(self.now_s)} of {clock(self.end_s)}  "
            f"{workers} workers  {sum(self.rescales.values())} rescales  "
            f"{time.perf_counter() - self.started:.0f} s"
        )

    def _show(self) -> None:
        if self.live:
            now = time.perf_counter()
            if now - self._last_draw >= 0.2 or self.iterations == self.total:
                self._last_draw = now
                print(f"\r{self.line()}\033[K", end="", file=self.stream, flush=True)
        elif self.now_s >= self._next_line_s or self.iterations == self.total:  # the last one too
            self._next_line_s = self.now_s + max(self.interval_s, (self.end_s - self.start_s) / 10)
            print(self.line(), file=self.stream, flush=True)

    def summary(
        self, score: dict[str, object], knowledge: str, audit: str, workload: str, topology: str = "single"
    ) -> str:
        """The end-of-run report: what ran, what it decided, how the job fared (twin ground truth)."""
        if self.live:
            print(f"\r{self.line()}\033[K", file=self.stream)
        wall_s = time.perf_counter() - self.started
        rescales = (
            ", ".join(f"{n} {action.replace('_', ' ')}" for action, n in sorted(self.rescales.items()))
            or "none"
        )
        rules = ", ".join(f"{rule} {n}" for rule, n in self.rules.most_common(5))
        models = ", ".join(f"{model} {n}" for model, n in self.models.most_common())
        workers = (
            f"{self.scaleouts[0]} → {self.scaleouts[-1]} (min {min(self.scaleouts)}, max {max(self.scaleouts)})"
            if self.scaleouts
            else "-"
        )
        lines = [
            f"foresail run: {self.iterations} iterations{self._surges()} on the digital twin "
            f"({workload}), "
            f"trace {clock(self.start_s)} → {clock(self.now_s)} of {clock(self.end_s)}, {wall_s:.1f} s wall time",
            f"  workers      {workers}; {_number(score.get('avg_workers'))} on average in this run "
            f"(the floor with perfect foresight: {_number(score.get('floor_avg_workers'))})",
            f"  rescales     {rescales}",
            f"  rules        {rules or '-'}",
            f"  forecasts    {models or '-'}",
            f"  latency      mean {_number(score.get('mean_latency_s'))} s, p95 {_number(score.get('p95_latency_s'))} s; "
            f"{score.get('seconds_over_slo', '-')} s over the {_number(score.get('slo_s'))} s SLO "
            f"({score.get('seconds_over_slo_after_restart', '-')} of them after a restart)",
            f"  knowledge    {knowledge} (the next `foresail run` resumes from it; `--fresh` starts afresh)",
            f"  audit log    {audit}",
            f"  plots        `run` draws none; `foresail compare --workload {workload}"
            f"{'' if topology == 'single' else f' --topology {topology}'} --policies foresail,static --seeds 1 "
            "--out results/` (with --config FILE if this run had one) writes PNG plots and a table to results/",
        ]
        return "\n".join(lines)


def _number(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value if value is not None else "-")
