"""The latency objective (`scaling.objective: latency`): the fewest workers whose predicted mean latency
meets `scaling.latency_target_ms` over the forecast horizon, within the Daedalus recovery bound.

Per vertex, λ = the forecast source peak over the horizon × its input ratio (DS2's walk) and μ = its
per-subtask true rate (capacity/dag.py); Elasticutor's greedy (capacity/latency.py) starts each vertex at
⌊λ/μ⌋ + 1 and adds the subtask that cuts E[T] most until the target holds. In reactive mode
(granularity job) every vertex runs at the job's scale-out, so the job needs the largest vertex need.

That need plugs into the plan as a floor: the wrapped foresail policy (Daedalus's Algorithm 1) sees no
capacity below it, so its rules stay as they are: a candidate must still carry the load, recover within
`recovery.target_s` and carry the forecast until recovered, or it is not taken.

The queueing model knows nothing of the latency outside the operators (Kafka fetches, network, buffer
timeouts) and assumes exponential service times. `LatencyLearning` learns a correction from the latency
the job shows (`Observation.latency_ms`) in steady windows: observed = offset + model when the windows'
model latencies have no spread, the regression line once they do; the plan meets the target through it,
and the raw model's error is kept for the report. The job's latency is read as each window's mean, or
with `scaling.latency_target_stat: p99` as its 99th percentile: the model gives means, the correction
then maps them to the p99, and the target bounds that.

Every rescale breaks a latency target for its recovery (the job is down, then catches up), so a voluntary
scale-in is taken only when rescales are rare enough for the target to hold in `met_share` of the time:
at least recovery / (1 − met_share) seconds after the last rescale. Per vertex (granularity vertex,
`VertexLatencyObjective`) the greedy's cores are each vertex's floor in the per-vertex plan, and a
scale-in's cost is the seconds its short pause keeps the latency over the target, (pause − slack) /
(1 − utilization) at the new configuration: it must fit in (1 − met_share) × the time since the last
rescale (at most the only-if-necessary window), and a roomier configuration that still saves slots is
taken when the tightest does not. A vertex whose hot key group cannot
carry the forecast at any parallelism (mape/skew.py) gets the parallelism beyond which its hot subtask
gains nothing, and the decision names the skew.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from capacity.key_groups import key_group_owner
from capacity.latency import Station, greedy_allocation, network_latency_s, service_floor_s
from capacity.model import CapacityModel
from capacity.regression import RegressionStats
from mape.extensions import ObservingExtension
from mape.knowledge import Knowledge
from mape.plan import ConfigurationPolicy, Policy, Proposal
from mape.skew import VertexSkew, skew_of
from mape.vertex_plan import LatencyTerms, VertexPolicy
from messages.types import Assessment, LatencyAssessment, Observation, VertexAssessment, finite_number

LATENCY = "latency"
MET_SHARE = 0.99
"""Share of the seconds the latency target should hold in: it spaces voluntary rescales."""
MAX_STEADY_LATENCY_S = 3600.0
"""A latency above this in a window that kept up with its load (no backlog) is no reading but bad data (a
unit error, a garbled sample): learned, one such window bent the correction line for good."""

_KEPT_ERRORS = 500
CORE = "'s core"


@dataclass
class LatencyKnowledge:
    """The learned correction of the queueing model and how far the raw model was off."""

    fit: RegressionStats = field(default_factory=RegressionStats)
    """x = the model's mean latency (s), y = the latency the job showed (s, its `stat`), over steady
    windows."""
    raw_errors: list[float] = field(default_factory=list)
    """|model − observed| / observed of the last windows (the raw model)."""
    corrected_errors: list[float] = field(default_factory=list)
    """The same for the correction known before each window (out of sample)."""
    residuals: list[float] = field(default_factory=list)
    """observed − model of the last windows: their median is the offset (robust to a window that still
    held some catch-up)."""
    new_records: list = field(default_factory=list)
    stat: str = "mean"
    """What the job's latency is read as: the window's 'mean' or its 'p99'."""

    def corrected_s(self, model_s: float) -> float:
        """The latency the job is expected to show when the model says `model_s`."""
        fit = self.fit
        if fit.n == 0:
            return model_s
        if fit.n >= 6 and fit.var_x > 0 and fit.slope_t >= 10 and fit.slope > 0:
            return fit.predict(model_s)
        return model_s + self.offset_s

    @property
    def offset_s(self) -> float:
        return float(np.median(self.residuals)) if self.residuals else 0.0

    def model_target_s(self, target_s: float) -> float:
        """The model latency whose corrected value is `target_s` (≤ 0: no scale-out can meet it)."""
        fit = self.fit
        if fit.n >= 6 and fit.var_x > 0 and fit.slope_t >= 10 and fit.slope > 0:
            return (target_s - fit.intercept) / fit.slope
        return target_s - self.offset_s

    def learn(self, model_s: float, observed_s: float) -> None:
        self.raw_errors = [*self.raw_errors, abs(model_s - observed_s) / observed_s][-_KEPT_ERRORS:]
        if self.fit.n:
            error = abs(self.corrected_s(model_s) - observed_s) / observed_s
            self.corrected_errors = [*self.corrected_errors, error][-_KEPT_ERRORS:]
        self.fit = self.fit.add(model_s, observed_s)
        self.residuals = [*self.residuals, observed_s - model_s][-_KEPT_ERRORS:]

    def summary(self) -> dict[str, float | None]:
        return {
            "latency_model_raw_error_pct": _median_pct(self.raw_errors),
            "latency_model_corrected_error_pct": _median_pct(self.corrected_errors),
            "latency_offset_s": round(self.offset_s, 4) if self.residuals else None,
        }

    def to_dict(self) -> dict:
        return {
            "stat": self.stat,
            "fit": self.fit.to_dict(),
            "raw": self.raw_errors,
            "corrected": self.corrected_errors,
            "residuals": self.residuals,
        }

    @classmethod
    def from_dict(cls, data: dict) -> LatencyKnowledge:
        """The stored correction; ValueError for a fit no steady window could give, and its lists keep only
        numbers (one string or null stored made every iteration's median raise)."""
        fit = RegressionStats.from_dict(data["fit"]) if "fit" in data else RegressionStats()
        # the model latency has no bound of its own (1e12 s: any a window gives); the shown one has
        if not fit.within(1e12, MAX_STEADY_LATENCY_S):  # 10^6 s shown corrected every target away
            raise ValueError("a latency fit no steady window could give")
        residuals = _numbers(data.get("residuals", []))  # their median is the offset: bounded like the fit
        return cls(
            fit,
            _numbers(data.get("raw", [])),
            _numbers(data.get("corrected", [])),
            [r for r in residuals if -1e12 <= r <= MAX_STEADY_LATENCY_S],
            stat=str(data.get("stat", "mean")),
        )


def _numbers(stored: object) -> list[float]:
    if not isinstance(stored, list):
        raise ValueError(f"not a list: {type(stored).__name__}")
    return [float(v) for v in stored if finite_number(v)][-_KEPT_ERRORS:]


def latency_of(knowledge: Knowledge, stat: str | None = None) -> LatencyKnowledge:
    """The learned correction; with `stat`, one for that statistic (another one's is dropped: it maps the
    model to a different latency)."""
    state = knowledge.extensions.get(LATENCY)
    if not isinstance(state, LatencyKnowledge) or (stat is not None and state.stat != stat):
        state = knowledge.extensions[LATENCY] = LatencyKnowledge(stat=stat or "mean")
    return state


def shown_s(latency_ms: np.ndarray, stat: str) -> float:
    """The latency a window shows, in seconds: the mean of its samples, or their 99th percentile (NaN
    samples left out; NaN when none is left)."""
    finite = latency_ms[np.isfinite(latency_ms)]
    if not len(finite):
        return math.nan
    return float(np.percentile(finite, 99) if stat == "p99" else finite.mean()) / 1000.0


def stations(
    vertices: tuple[VertexAssessment, ...], knowledge: Knowledge, source_rps: float, max_cores: int
) -> list[Station]:
    """Each vertex with a known true rate as a queue at `source_rps`: keyed vertices as split queues with
    their key-group shares (and a persistent hot key group's floor), the others as M/M/k."""
    skew = skew_of(knowledge)
    hot = {v.name: v for v in skew.persistent()} if skew else {}
    result = []
    for v in vertices:
        if not (math.isfinite(v.true_rate_rps) and v.true_rate_rps > 0 and math.isfinite(v.input_ratio)):
            continue
        shares = None
        if v.keyed:
            known = knowledge.dag.vertices.get(v.vertex_id)
            loads = known.key_loads if known is not None else None
            shares = _shares_of(loads, hot.get(v.name))
        arrival_rps = source_rps * v.input_ratio
        result.append(Station(v.name, arrival_rps, v.true_rate_rps, shares, max_cores, v.vertex_id))
    return result


def _shares_of(key_loads: np.ndarray | None, hot) -> object:
    def shares(parallelism: int) -> np.ndarray:
        if key_loads is None or not key_loads.sum() > 0:
            result = np.full(parallelism, 1.0 / parallelism)
        else:
            owner = key_group_owner(len(key_loads), parallelism)
            result = np.bincount(owner, weights=key_loads, minlength=parallelism) / key_loads.sum()
        floor = hot.hot_subtask_share(parallelism) if hot is not None else math.nan
        top = int(np.argmax(result))
        if math.isfinite(floor) and floor > result[top] and parallelism > 1:
            rest = result.sum() - result[top]
            if rest > 0:
                result = result * (1.0 - floor) / rest
            result[top] = floor
        return result

    return shares


def forecast_peak_rps(a: Assessment) -> float:
    """The load to plan the latency for: the forecast's peak over the horizon, else the window's."""
    if a.forecast_rps is not None and len(a.forecast_rps):
        return float(np.max(a.forecast_rps))
    return a.workload_max_rps


@dataclass(frozen=True)
class LatencyNeed:
    scaleout: int | None
    reasons: tuple[str, ...]
    hot_key_limit: bool = False


def latency_need(a: Assessment, knowledge: Knowledge, target_s: float, max_scaleout: int) -> LatencyNeed:
    """The job scale-out whose predicted latency meets the target at the forecast peak (None: unknown)."""
    peak = forecast_peak_rps(a)
    if not (math.isfinite(peak) and peak > 0):
        return LatencyNeed(None, ("latency: no load to plan for",))
    queues = stations(a.vertices, knowledge, peak, max_scaleout)
    if not queues:
        return LatencyNeed(None, ("latency: no vertex's true rate known yet: recovery objective",))
    correction = latency_of(knowledge)
    model_target_s = correction.model_target_s(target_s)
    floor_s = service_floor_s(queues, peak)
    if not model_target_s > floor_s:
        shown_s = correction.corrected_s(floor_s if math.isfinite(floor_s) else 0.0)
        return LatencyNeed(
            None,
            (
                f"latency: the job shows {shown_s * 1000:.0f} ms without queueing, at or above the "
                f"{target_s * 1000:.0f} ms target: no scale-out meets it",
            ),
        )
    allocation = greedy_allocation(queues, peak, model_target_s)
    need = dict(zip((q.name for q in queues), allocation.cores, strict=True))
    model_s = allocation.latency_s
    predicted = correction.corrected_s(model_s) if math.isfinite(model_s) else math.inf
    summary = (
        f"latency: at forecast peak {peak:.0f} rps the greedy gives "
        + ", ".join(f"{n}={k}" for n, k in need.items())
        + f"; model {_ms(model_s)}, corrected {_ms(predicted)} vs {correction.stat} target "
        + f"{target_s * 1000:.0f} ms"
    )
    if allocation.met:
        scaleout = max(allocation.cores)
        shared = shared_core_scaleout(queues, scaleout, max_scaleout)
        if shared is None:
            hot = _hot_limited(a, knowledge, queues, max_scaleout, shared_core=True)
            if hot is not None:
                return LatencyNeed(hot[1], (summary, hot[2]), hot_key_limit=True)
            return LatencyNeed(
                max_scaleout, (summary, f"the TaskManagers' cores saturate up to {max_scaleout}")
            )
        if shared > scaleout:
            summary += f"; the vertices share each TaskManager's core: {shared} keep every core below 100%"
        return LatencyNeed(shared, (summary,))
    hot = _hot_limited(a, knowledge, queues, max_scaleout)
    if hot is not None:
        name, useful, text = hot
        others = [k for q, k in zip(queues, allocation.cores, strict=True) if q.name != name]
        scaleout = max([useful, *others])
        return LatencyNeed(scaleout, (summary, text), hot_key_limit=True)
    return LatencyNeed(max_scaleout, (summary, f"target not met within {max_scaleout}: {allocation.reason}"))


def core_load(queues: list[Station], scaleout: int) -> float:
    """Busy share of the busiest TaskManager's core at `scaleout`: in reactive mode TaskManager i runs
    subtask i of every vertex on one core, so their work adds up (Σ_v λ_v · share_v,i / μ_v)."""
    total = np.zeros(scaleout)
    for q in queues:
        cores = min(scaleout, q.max_cores or scaleout)
        shares = q.shares(cores) if q.shares is not None else np.full(cores, 1.0 / cores)
        total[:cores] += q.arrival_rps * np.asarray(shares) / np.sum(shares) / q.service_rps
    return float(total.max())


def shared_core_scaleout(queues: list[Station], start: int, max_scaleout: int) -> int | None:
    """The least scale-out from `start` whose busiest core stays below saturation (None: none does)."""
    for scaleout in range(start, max_scaleout + 1):
        if core_load(queues, scaleout) < 1.0 - 1e-9:
            return scaleout
    return None


def _hot_limited(
    a: Assessment, knowledge: Knowledge, queues: list[Station], max_scaleout: int, shared_core: bool = False
) -> tuple[str, int, str] | None:
    """A keyed vertex that no parallelism stabilises because of its hot key group, the parallelism beyond
    which its hot subtask gains nothing, and the sentence that names the skew."""
    skew = skew_of(knowledge)
    if skew is None:
        return None
    hot = skew.by_name()
    for queue in queues:
        known = hot.get(queue.name)
        if known is None or not known.persistent:
            continue
        if not shared_core and math.isfinite(queue.sojourn_s(max_scaleout)):
            continue
        useful = _useful(a, known, max_scaleout)
        text = (
            f"skew: {known.describe()}; no parallelism up to {max_scaleout} carries the forecast on its hot "
            f"subtask{CORE if shared_core else ''} (≥ {known.hot_subtask_share(max_scaleout):.0%} of its "
            f"records at {max_scaleout}): "
            f"beyond {useful} the hot subtask gains nothing"
        )
        return queue.name, useful, text
    return None


def _hot_bottleneck(a: Assessment, knowledge: Knowledge, max_scaleout: int) -> tuple[int, str] | None:
    """When the bottleneck vertex has a persistent hot key: the parallelism beyond which its hot subtask
    gains nothing (more workers neither carry nor catch up more), and why."""
    skew = skew_of(knowledge)
    known = skew.by_name().get(a.bottleneck_vertex) if skew is not None and a.bottleneck_vertex else None
    if known is None or not known.persistent:
        return None
    useful = _useful(a, known, max_scaleout)
    return useful, f"skew: {known.describe()}; beyond {useful} its hot subtask gains nothing"


def _useful(a: Assessment, known: VertexSkew, max_scaleout: int) -> int:
    """Where more workers stop adding capacity: from the capacities (the per-vertex model behind them fits
    the key groups' loads over every parallelism seen), else from the hot key group's estimate, which
    takes the other groups as even."""
    return a.most_capacity_scaleout(1, max_scaleout) or known.useful_parallelism(max_scaleout)


class LatencyObjective:
    """Wraps the foresail policy with the latency need as a floor and the rescale spacing of the target."""

    name = "foresail"

    def __init__(
        self, inner: Policy, target_s: float, max_scaleout: int, met_share: float = MET_SHARE
    ) -> None:
        self.inner = inner
        self.target_s = target_s
        self.max_scaleout = max_scaleout
        self.met_share = met_share

    def propose(self, assessment: Assessment, knowledge: Knowledge) -> tuple[int, str, tuple[str, ...]]:
        p = self.propose_configuration(assessment, knowledge)
        return p.scaleout, p.rule, p.reasons

    def propose_configuration(self, a: Assessment, knowledge: Knowledge) -> Proposal:
        need = latency_need(a, knowledge, self.target_s, self.max_scaleout)
        current = a.current_scaleout
        if need.hot_key_limit:
            return Proposal(need.scaleout, "hot-key-limit", need.reasons)
        if need.scaleout is None:
            proposal = self._inner(a, knowledge)
            return replace(proposal, reasons=(*need.reasons, *proposal.reasons))
        proposal = self._inner(_floored(a, need.scaleout), knowledge)
        reasons = (*need.reasons, *proposal.reasons)
        hot = _hot_bottleneck(a, knowledge, self.max_scaleout)
        if hot is not None and proposal.scaleout > max(hot[0], need.scaleout, current):
            useful = max(hot[0], need.scaleout)
            return Proposal(
                useful,
                "hot-key-limit",
                (*need.reasons, f"{proposal.rule} wanted {proposal.scaleout}: {hot[1]}"),
            )
        since = math.inf if knowledge.last_rescale_s is None else a.time_s - knowledge.last_rescale_s
        if current >= need.scaleout and proposal.scaleout < current:
            recovery_s = a.recovery_s.get(proposal.scaleout, math.inf)
            gap_s = recovery_s / (1.0 - self.met_share)
            if since < gap_s:
                return Proposal(
                    current,
                    "latency-spacing",
                    (
                        *need.reasons,
                        f"scale-in to {proposal.scaleout} waits: a rescale breaks the target for ~"
                        f"{recovery_s:.0f} s, so at most one per {gap_s:.0f} s (last {since:.0f} s ago)",
                    ),
                )
        return replace(proposal, reasons=reasons)

    def urgent(self, a: Assessment, knowledge: Knowledge) -> Proposal | None:
        """The inner policy's surge rule (it does not wait out stabilization), at least the latency need."""
        urgent = getattr(self.inner, "urgent", None)
        surge = urgent(a, knowledge) if urgent is not None else None
        if surge is None:
            return None
        proposal = surge if isinstance(surge, Proposal) else Proposal(*surge)
        need = latency_need(a, knowledge, self.target_s, self.max_scaleout)
        if need.scaleout is None or need.scaleout <= proposal.scaleout or need.hot_key_limit:
            return proposal
        return replace(proposal, scaleout=need.scaleout, reasons=(*proposal.reasons, *need.reasons))

    def _inner(self, a: Assessment, knowledge: Knowledge) -> Proposal:
        if isinstance(self.inner, ConfigurationPolicy):
            return self.inner.propose_configuration(a, knowledge)
        return Proposal(*self.inner.propose(a, knowledge))


def _floored(a: Assessment, least: int) -> Assessment:
    """The assessment with no capacity below `least` workers, at every memory level too (a memory policy
    inside took a cheaper level's 4 workers where the latency needed 6)."""

    def floor(capacities: dict[int, float]) -> dict[int, float]:
        return {n: (c if n >= least else 0.0) for n, c in capacities.items()}

    memory = a.memory
    if memory is not None:
        by_level = {level: floor(per) for level, per in memory.capacities_by_level.items()}
        memory = replace(memory, capacities_by_level=by_level)
    return replace(a, capacities_rps=floor(a.capacities_rps), memory=memory)


def vertex_latency_terms(
    a: Assessment,
    knowledge: Knowledge,
    target_s: float,
    max_slots: int,
    met_share: float,
    budget_window_s: float = math.inf,
) -> LatencyTerms:
    """Per vertex, the greedy's cores at the forecast peak as floors; the pause slack and the budget: the
    share of the time since the last rescale the target may miss, that time counted up to
    `budget_window_s` (a long calm does not let one rescale spend it all: a pause's cost grows as
    1 / (1 − u), so an error in the capacity costs most where the most was allowed)."""
    correction = latency_of(knowledge)
    # before the job's latency is read (none yet, or no query for it) its latency without queueing is taken
    # as 0, which prices a pause low; taking the whole target instead held every scale-in for good on a
    # job whose latency is never read (check-config notes a latency objective without a latency query)
    slack_s = target_s - correction.corrected_s(0.0)
    since_s = math.inf if knowledge.last_rescale_s is None else a.time_s - knowledge.last_rescale_s
    budget_s = (1.0 - met_share) * min(since_s, budget_window_s)
    slack = f"{slack_s * 1000:.0f} ms of slack" + (
        "" if correction.fit.n else " (latency not read yet: taken as 0)"
    )
    allowance = f"latency: {slack} for a rescale's pause, {budget_s:.0f} s over the target allowed since the last rescale"
    peak = forecast_peak_rps(a)
    queues = stations(a.vertices, knowledge, peak, max_slots) if math.isfinite(peak) and peak > 0 else []
    model_target_s = correction.model_target_s(target_s)
    if not queues:
        return LatencyTerms(
            {}, slack_s, budget_s, ("latency: no floor (no true rate or no load yet)", allowance)
        )
    if not model_target_s > service_floor_s(queues, peak):
        why = f"latency: no floor (the {target_s * 1000:.0f} ms target is below the job's latency without queueing)"
        return LatencyTerms({}, slack_s, budget_s, (why, allowance))
    allocation = greedy_allocation(queues, peak, model_target_s)
    floors = {q.vertex_id: k for q, k in zip(queues, allocation.cores, strict=True)}
    need = (
        f"latency: at forecast peak {peak:.0f} rps the greedy gives "
        + ", ".join(f"{q.name}={k}" for q, k in zip(queues, allocation.cores, strict=True))
        + f", model {_ms(allocation.latency_s)} ({allocation.reason})"
    )
    return LatencyTerms(floors, slack_s, budget_s, (need, allowance))


class VertexLatencyObjective:
    """The latency objective per vertex: the greedy's cores as each vertex's floor, and a scale-in taken
    only when its pause (the learned per-vertex downtime, then the catch-up at the new configuration's
    utilization) costs no more seconds over the target than the target allows since the last rescale (at
    most over the plan's only-if-necessary window); among the configurations that still save, the first
    roomy enough for that."""

    name = "foresail"

    def __init__(
        self, inner: VertexPolicy, target_s: float, max_slots: int, met_share: float = MET_SHARE
    ) -> None:
        self.inner = inner
        self.target_s = target_s
        self.max_slots = max_slots
        self.met_share = met_share
        self.budget_window_s = inner.necessary_window_s
        """The allowance accrues over at most the window the plan keeps a configuration anyway."""

    def propose_configuration(self, a: Assessment, knowledge: Knowledge) -> Proposal:
        return self.inner.propose_configuration(a, knowledge, self._terms(a, knowledge))

    def urgent(self, a: Assessment, knowledge: Knowledge) -> Proposal | None:
        return self.inner.urgent(a, knowledge, self._terms(a, knowledge))

    def _terms(self, a: Assessment, knowledge: Knowledge) -> LatencyTerms:
        return vertex_latency_terms(
            a, knowledge, self.target_s, self.max_slots, self.met_share, self.budget_window_s
        )


class LatencyLearning(ObservingExtension):
    """Analysis extension: learns the model's correction from the latency the job shows in steady windows
    (no problems, running for a window past the warm-up, no backlog beyond a second of input), read as the
    window's mean or its p99 (`stat`)."""

    def __init__(self, stat: str = "mean") -> None:
        self.stat = stat

    def capacity_model(
        self, observation: Observation, knowledge: Knowledge, current: int
    ) -> CapacityModel | None:
        latency_of(knowledge, self.stat)
        return None

    def refine(self, observation: Observation, knowledge: Knowledge, assessment: Assessment) -> Assessment:
        a = assessment
        correction = latency_of(knowledge, self.stat)
        observed_s = (
            math.nan if observation.latency_ms is None else shown_s(observation.latency_ms, self.stat)
        )
        model_s = self._model_s(a, knowledge)
        predicted_s = correction.corrected_s(model_s)  # NaN in, NaN out
        learned = (
            self._steady(observation, knowledge, a)
            and math.isfinite(model_s)
            and 0 < observed_s <= MAX_STEADY_LATENCY_S
        )
        if learned:
            correction.learn(model_s, observed_s)
        summary = correction.summary()
        return replace(
            a,
            latency=LatencyAssessment(
                self.stat,
                _round_ms(observed_s),
                _round_ms(model_s),
                _round_ms(predicted_s),
                learned,
                correction.fit.n,
                summary["latency_model_raw_error_pct"],
                summary["latency_model_corrected_error_pct"],
                _round_ms(correction.offset_s) if correction.residuals else None,
            ),
        )

    @staticmethod
    def _steady(observation: Observation, knowledge: Knowledge, a: Assessment) -> bool:
        """A window the model describes: no problems, running for a window past the warm-up (no restart's
        catch-up in it), no backlog beyond a second of input."""
        if a.problems or a.warming_up or observation.uptime_s is None:
            return False
        settled_s = observation.window_s + knowledge.dag.settings.warmup_s
        return (
            observation.uptime_s >= settled_s
            and a.workload_avg_rps > 0
            and a.backlog_records <= a.workload_avg_rps
        )

    @staticmethod
    def _model_s(a: Assessment, knowledge: Knowledge) -> float:
        """The raw model's mean latency at the window's load and the running parallelism of every vertex."""
        rate = a.workload_avg_rps
        if not a.vertices or not (rate > 0):
            return math.nan
        queues = stations(a.vertices, knowledge, rate, a.current_scaleout)
        if not queues:
            return math.nan
        running = {v.vertex_id: v.parallelism for v in a.vertices}  # it may differ from the job's
        return network_latency_s(queues, [running[q.vertex_id] for q in queues], rate)


def _round_ms(seconds: float) -> float | None:
    return round(seconds * 1000, 3) if math.isfinite(seconds) else None


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if math.isfinite(seconds) else "unbounded"


def _median_pct(values: list[float]) -> float | None:
    return round(float(np.median(values)) * 100, 2) if values else None
