"""Plausibility checks of an Observation: data that parses but cannot be true must not drive a decision.

Each check is a pure function of the Observation (the conservation check also of a `Ledger` of what
earlier ones showed) giving named problems. A problem reads `implausible[<reason>]: <detail>`, so the audit
event names the reason and the daemon's metrics count it (`reasons_in`). Any problem makes the plan hold
(`hold-bad-data`): the loop never scales in, or out, on such data, and never learns from it.

Reasons:
- ``negative-rate``: an input rate or a worker throughput below zero (e.g. a query adding the derivative of
  a shrinking backlog).
- ``rate-out-of-range``: an input rate or throughput above 10^9 records/s, or a backlog above an hour of
  that (a lag of 10^15 records took the plan to its largest scale-out).
- ``non-finite-rate``: an infinite input rate, throughput or CPU (NaN stays a gap, handled elsewhere).
- ``cpu-out-of-range``: a worker's CPU below 0, or a window's median above `CPU_HEADROOM` × cores (CPU in
  percent, a wrong query). A TaskManager's JVM runs GC, network and timer threads beside its slot's task,
  so a reading somewhat above one core is real (1.28 cores on the end-to-end stack).
- ``throughput-above-input``: over a span since a recorded earlier observation, the workers processed
  more records than arrived plus the backlog there was to drain (conservation, see `throughput_above_input`).
- ``throughput-unverified``: a daemon's first windows, before any span exists, with the workers processing
  over three times what arrives and waits. A drain that just ended cannot be told from a wrong meter yet
  (the real stack shows 5x for the half minute after a backlog is gone), so the loop holds and learns
  nothing until the ledger spans enough time to judge.
- ``parallelism-mismatch``: the job's parallelism differs from the number of workers reporting in the
  window's newer half, once the job has run for a whole window.
- ``stale-samples``: the newest input-rate sample, or one worker's while the job still counts it, is
  older than half the window.
"""

from __future__ import annotations

import math
import re
import warnings
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from messages.types import MAX_RATE_RPS, Observation

REASONS = (
    "negative-rate",
    "rate-out-of-range",
    "non-finite-rate",
    "cpu-out-of-range",
    "throughput-above-input",
    "throughput-unverified",
    "parallelism-mismatch",
    "stale-samples",
)
_PATTERN = re.compile(r"^implausible\[([a-z-]+)\]")

MAX_BACKLOG_RECORDS = MAX_RATE_RPS * 3600
"""An hour at the highest rate any series may show: a larger backlog is a broken lag metric."""
CPU_HEADROOM = 2.0
"""A worker's median CPU may reach this many times its cores (its JVM's own threads) before it counts as
out of range; CPU in percent reads tens of times more."""
THROUGHPUT_SLACK = 1.5
"""Processed records may exceed arrivals + drainable backlog by this factor before they count as
implausible: records in flight between the source and the measured operator (network buffers, restored
channel state) are drained too, yet no backlog metric shows them."""
MIN_RPS = 20.0
"""Throughputs this small are noise to the throughput check (allowed on top of the bound, per second)."""
RATE_SPAN_S = 60.0
"""Longest span a rate query averages over (the default queries' `[1m]`): a throughput sample at t counts
records processed since t - RATE_SPAN_S at the earliest."""
UNVERIFIED_FACTOR = 3.0
"""Without an earlier observation to compare with, processed records/s may exceed this many times what
arrives + the backlog now over a window: only a gross error is named before the ledger spans enough time."""
LEDGER_HORIZON_S = 600.0
"""How far back the conservation check reaches: a longer span averages the in-flight records out."""


@dataclass(frozen=True)
class Implausible:
    reason: str
    detail: str

    def __str__(self) -> str:
        return f"implausible[{self.reason}]: {self.detail}"


@dataclass
class Ledger:
    """What the observations of the last `LEDGER_HORIZON_S` showed, for the conservation check: the backlog
    at each one and, per sample time of the plausible ones, the input rate and the workers' total throughput
    (overlapping windows share sample times: the newest reading wins). Saved with the knowledge, so a
    restarted daemon goes on checking against what its predecessor saw."""

    backlogs: deque[tuple[float, float]] = field(default_factory=deque)
    samples: dict[float, tuple[float, float, float]] = field(default_factory=dict)
    """Sample time → (input records/s, processed records/s, seconds the sample stands for)."""

    def record(self, observation: Observation, samples: dict[float, tuple[float, float, float]]) -> None:
        """Adds the observation's backlog and its `samples` (`_samples`; none where they are not to be
        trusted: their times then count on neither side)."""
        self.samples.update(samples)
        if _finite(observation.backlog_records):
            self.backlogs.append((observation.time_s, float(observation.backlog_records)))
        now_s = observation.time_s
        oldest_s = now_s - LEDGER_HORIZON_S
        # entries after now (a clock stepped back) go too: one at the head kept every later one forever
        self.backlogs = deque(b for b in self.backlogs if oldest_s <= b[0] <= now_s)
        for time_s in [t for t in self.samples if not oldest_s <= t <= now_s]:
            del self.samples[time_s]

    def median_input_rps(self, since_s: float) -> float:
        """The median input rate of the plausible samples after `since_s` (within the last
        `LEDGER_HORIZON_S`); NaN without one. What the load mostly was: a spike of a minute or two does not
        move it."""
        rates = [rate for t, (rate, _, _) in self.samples.items() if t > since_s]
        return float(np.median(rates)) if rates else math.nan

    def to_dict(self) -> dict[str, list]:
        return {
            "backlogs": [list(b) for b in self.backlogs],
            "samples": [[t, *v] for t, v in self.samples.items()],
        }

    @classmethod
    def from_dict(cls, state: dict) -> Ledger:
        """Rebuilt from `to_dict`; an unreadable part starts empty (the check then waits to span time again)."""
        try:
            backlogs = deque((float(t), float(b)) for t, b in state.get("backlogs", []))
            samples = {float(t): (float(a), float(p), float(s)) for t, a, p, s in state.get("samples", [])}
        except (AttributeError, TypeError, ValueError):
            return cls()
        return cls(backlogs, samples)


def check(observation: Observation, ledger: Ledger | None = None, cores: float = 1.0) -> list[Implausible]:
    """Every implausibility of the observation. With a `ledger`, the conservation check runs against it
    and the observation is recorded into it: its backlog always (the span's clock starts with the first
    observation), its rate samples only when plausible (bad data never becomes the reference)."""
    found = [
        *rates(observation),
        *cpu(observation, cores),
        *parallelism_mismatch(observation),
        *stale(observation),
    ]
    if ledger is not None:
        samples = _samples(observation)
        found.extend(throughput_above_input(observation, ledger, samples))
        ledger.record(observation, {} if found else samples)
    return found


def reasons_in(problems: tuple[str, ...] | list[str]) -> list[str]:
    """The reason names of the plausibility problems among an assessment's problems (for metrics)."""
    return [match.group(1) for p in problems if (match := _PATTERN.match(p))]


def rates(observation: Observation) -> list[Implausible]:
    found = _rate_problems("input rate", observation.input_rate_rps[None, :])
    names = [f"throughput of {w.worker_id}" for w in observation.workers]
    found.extend(_rate_problems(names, _stacked(observation, "throughput_rps")))
    if observation.recent_input_rate_rps is not None:
        found.extend(_rate_problems("recent input rate", observation.recent_input_rate_rps[None, :]))
    backlog = observation.backlog_records
    if backlog is not None and math.isfinite(backlog) and backlog > MAX_BACKLOG_RECORDS:
        found.append(
            Implausible("rate-out-of-range", f"backlog of {backlog:.3g} records > {MAX_BACKLOG_RECORDS:g}")
        )
    return found


def _rate_problems(names: str | list[str], values: np.ndarray) -> list[Implausible]:
    """Per row of `values` (one series each, NaN-padded), in row order: infinite, negative, too large."""
    infinite = np.isinf(values).any(axis=1)
    low, high = _finite_extremes(values)
    found = []
    for i in np.flatnonzero(infinite | (low < 0) | (high > MAX_RATE_RPS)):
        name = names if isinstance(names, str) else names[i]
        if infinite[i]:
            found.append(Implausible("non-finite-rate", f"{name} is infinite"))
        if low[i] < 0:
            found.append(Implausible("negative-rate", f"{name} down to {low[i]:.1f} records/s"))
        if high[i] > MAX_RATE_RPS:
            found.append(
                Implausible("rate-out-of-range", f"{name} up to {high[i]:.3g} records/s > {MAX_RATE_RPS:g}")
            )
    return found


def cpu(observation: Observation, cores: float = 1.0) -> list[Implausible]:
    """Per worker, in order: an infinite CPU, and finite CPU below 0 or with a median above the cores
    (× headroom). Judged on all workers at once: a per-worker loop took ~30 ms an iteration at 1,000."""
    values = _stacked(observation, "cpu")
    infinite = np.isinf(values).any(axis=1)
    low, high = _finite_extremes(values)
    finite = np.where(np.isfinite(values), values, np.nan)
    with warnings.catch_warnings():  # a worker without a finite sample: NaN, judged by nothing
        warnings.simplefilter("ignore", RuntimeWarning)
        median = np.nanmedian(finite, axis=1) if finite.size else np.full(len(values), np.nan)
    limit = cores * CPU_HEADROOM
    out = (low < 0) | (median > limit)
    found = []
    for i in np.flatnonzero(infinite | out):
        worker_id = observation.workers[i].worker_id
        if infinite[i]:
            found.append(Implausible("non-finite-rate", f"CPU of {worker_id} is infinite"))
        if out[i]:
            found.append(
                Implausible(
                    "cpu-out-of-range",
                    f"CPU of {worker_id} {low[i]:.2f}..{high[i]:.2f} outside "
                    f"[0, {limit:g}] (a load in cores, not percent, is expected)",
                )
            )
    return found


def throughput_above_input(
    observation: Observation, ledger: Ledger, samples: dict[float, tuple[float, float, float]]
) -> list[Implausible]:
    """Records processed ≤ records arrived + the backlog there was to drain, over one span (× slack).

    The span starts at the earliest observation in the ledger at least `RATE_SPAN_S` + a window back.
    Throughput samples count from `RATE_SPAN_S` after its start on, since a rate at t averages over up to
    `RATE_SPAN_S` before t: every record they count was processed inside the span. Arrivals count over the
    whole span, and the drainable backlog is the largest the span showed (a restart's replay shows there:
    the source's offsets rewind), so the bound only errs on the lenient side. Sample times no observation
    covered count on neither side.

    Without such a span (a daemon's first windows) a drain cannot be told from a wrong meter: a throughput
    over `UNVERIFIED_FACTOR` times what arrives and waits now is named `throughput-unverified` then.
    """
    now_s = observation.time_s
    latest_start_s = now_s - RATE_SPAN_S - observation.window_s
    starts = [t for t, _ in ledger.backlogs if t <= latest_start_s]
    if not starts:
        return _unverified(observation)
    start_s = min(starts)
    samples = {**ledger.samples, **samples}
    arrived = processed = processed_s = 0.0
    for time_s, (input_rps, processed_rps, step_s) in samples.items():
        if start_s < time_s <= now_s:
            arrived += input_rps * step_s
            if time_s > start_s + RATE_SPAN_S:
                processed += processed_rps * step_s
                processed_s += step_s
    backlogs = [b for t, b in ledger.backlogs if start_s <= t <= now_s]
    if _finite(observation.backlog_records):
        backlogs.append(float(observation.backlog_records))
    drainable = max(backlogs)
    if processed <= THROUGHPUT_SLACK * (arrived + drainable) + MIN_RPS * processed_s:
        return []
    return [
        Implausible(
            "throughput-above-input",
            f"workers processed {processed:.0f} records in {processed_s:.0f} s, but {arrived:.0f} arrived "
            f"over the {now_s - start_s:.0f} s up to now and at most {drainable:.0f} were waiting",
        )
    ]


def _unverified(observation: Observation) -> list[Implausible]:
    arrived_rps = _mean(observation.input_rate_rps)
    processed_rps = sum(_mean(w.throughput_rps, 0.0) for w in observation.workers)
    if not math.isfinite(arrived_rps):
        return []
    waiting = observation.backlog_records if _finite(observation.backlog_records) else 0.0
    allowed_rps = UNVERIFIED_FACTOR * (arrived_rps + waiting / observation.window_s) + MIN_RPS
    if processed_rps <= allowed_rps:
        return []
    return [
        Implausible(
            "throughput-unverified",
            f"workers process {processed_rps:.0f} records/s, but {arrived_rps:.0f} arrive and {waiting:.0f} "
            "wait, and no earlier observation yet tells a drained backlog from a wrong meter",
        )
    ]


def parallelism_mismatch(observation: Observation) -> list[Implausible]:
    """Workers reporting in the window's newer half vs the parallelism, on a job up for a window.

    The newer half, not the newest instant: one scrape a loaded machine missed leaves a worker's newest
    step empty (seen on real Flink under CI load) without it having left the job. The stale check uses
    the same limit, so a worker gone longer than that is named there. A worker listed without a single
    throughput sample has just joined (a TaskManager added by a scale-out, its meter not scraped yet:
    seen on the end-to-end Kubernetes path 5 s after the rescale was ready); it makes up the count, and
    the source names its missing series, on which the loop holds anyway.
    """
    parallelism, uptime_s = observation.parallelism, observation.uptime_s
    if parallelism is None or uptime_s is None or not _finite(uptime_s) or uptime_s < observation.window_s:
        return []
    (newest,) = _newest(observation, "throughput_rps")
    if not len(newest) or newest.max() == -math.inf:
        return []
    reporting = int((newest >= newest.max() - observation.window_s / 2).sum())
    joining = int((newest == -math.inf).sum())
    if reporting == parallelism or reporting + joining == parallelism:
        return []
    return [
        Implausible(
            "parallelism-mismatch", f"parallelism {parallelism}, but {reporting} workers report throughput"
        )
    ]


def stale(observation: Observation) -> list[Implausible]:
    """The input rate's newest sample, and each worker's CPU and throughput, against half the window.

    A worker whose series ended may have left the job (a scale-in): it is stale only while the job still
    counts it, i.e. while fewer workers are fresh than its parallelism (or that is unknown). Within a
    window of a (re)start workers come and go, so only the input rate is judged then.
    """
    limit_s = observation.window_s / 2
    found = []
    input_age_s = _age_s(observation.time_s, observation.input_timestamps_s, observation.input_rate_rps)
    if input_age_s is not None and input_age_s > limit_s:
        found.append(Implausible("stale-samples", f"newest input-rate sample is {input_age_s:.0f} s old"))
    uptime_s = observation.uptime_s
    if _finite(uptime_s) and uptime_s < observation.window_s:
        return found
    # a worker's age: that of the staler of its CPU and throughput series, of those with a sample at all
    newest = [np.where(t > -math.inf, t, math.inf) for t in _newest(observation, "cpu", "throughput_rps")]
    staler = np.minimum(*newest)
    ages = np.where(staler < math.inf, observation.time_s - staler, math.inf)
    stale_ones = {observation.workers[i].worker_id: float(ages[i]) for i in np.flatnonzero(ages > limit_s)}
    fresh = len(ages) - len(stale_ones)
    parallelism = observation.parallelism
    if stale_ones and (parallelism is None or fresh < parallelism):
        found.extend(
            Implausible(
                "stale-samples",
                f"newest sample of worker {w} is {age:.0f} s old"
                if math.isfinite(age)
                else f"worker {w} has no sample in the window",
            )
            for w, age in sorted(stale_ones.items())
        )
    return found


def _age_s(now_s: float, timestamps_s: np.ndarray, values: np.ndarray) -> float | None:
    """Seconds since the newest finite sample; None when there is none (a gap named elsewhere)."""
    known = timestamps_s[np.isfinite(values)]
    return now_s - float(known.max()) if len(known) else None


def _samples(observation: Observation) -> dict[float, tuple[float, float, float]]:
    """Sample time → (input, total throughput, seconds it stands for) where the input rate is known."""
    stamps = observation.input_timestamps_s
    if len(stamps) == 0:
        return {}
    step_s = float(np.median(np.diff(stamps))) if len(stamps) > 1 else observation.window_s
    processed = np.zeros(len(stamps))
    for worker in observation.workers:  # in worker order: the same sums as ever, to the last bit
        if len(worker.timestamps_s) == len(stamps) and np.array_equal(worker.timestamps_s, stamps):
            processed += np.nan_to_num(worker.throughput_rps, nan=0.0, posinf=0.0, neginf=0.0)
    return {
        float(t): (float(a), float(p), step_s)
        for t, a, p in zip(stamps, observation.input_rate_rps, processed, strict=True)
        if math.isfinite(a)
    }


def _stacked(observation: Observation, name: str) -> np.ndarray:
    """One of the workers' series as a workers × samples matrix, shorter series padded with NaN (no
    sample there), so that a check runs over all workers at once."""
    series = [getattr(w, name) for w in observation.workers]
    width = max((len(v) for v in series), default=0)
    stacked = np.full((len(series), width), np.nan)
    for row, values in zip(stacked, series, strict=True):
        row[: len(values)] = values
    return stacked


def _finite_extremes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the smallest and largest finite value (+inf and -inf where a row has none)."""
    finite = np.isfinite(values)
    low = np.where(finite, values, math.inf).min(axis=1, initial=math.inf)
    high = np.where(finite, values, -math.inf).max(axis=1, initial=-math.inf)
    return low, high


def _newest(observation: Observation, *names: str) -> list[np.ndarray]:
    """Per series name, per worker: the time of its newest finite sample (-inf: none)."""
    times = _stacked(observation, "timestamps_s")
    return [
        np.where(np.isfinite(_stacked(observation, name)), times, -math.inf).max(axis=1, initial=-math.inf)
        for name in names
    ]


def _mean(values: np.ndarray, default: float = math.nan) -> float:
    known = values[np.isfinite(values)]
    return float(known.mean()) if len(known) else default


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
