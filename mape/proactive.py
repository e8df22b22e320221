"""The foresail policy: Daedalus's Algorithm 1 — scale ahead of the load, rarely, within a recovery target.

Capacities come from the capacity model, the per-second forecast from the forecaster and the predicted
recovery time per candidate from the recovery module (all in the Assessment). Every proposal names the
rule that decided it:

- ``only-if-necessary``: a rescale happened in the last `necessary_window_s` and the current capacity still
  carries the average load and the forecast until the next loop — keep it. After a surge whose load
  holds (a new level: more than the scale-out before the surge carries), only for `surge_level_window_s`:
  the surge sized its scale-out to drain a backlog that is gone by then, and the regular rules size it
  to the level. A surge whose load has gone back (a spike) keeps the whole window: spikes recur, and each
  costs a restart on the way down and a surge on the way up.
- ``current-valid``: the smallest valid scale-out is the current one.
- ``long-lived``: the smallest valid scale-out that also carries the whole forecast horizon (with
  `scale_out_to_upper`, a scale-out carries the horizon's upper bound: its restart crosses the SLO, so on a
  rising load it is paid once rather than per step; a scale-in's shorter restart mostly does not).
- ``idle``: no load arrives, none is forecast until the next loop and nothing waits: the smallest
  scale-out whose restart meets the recovery target (with nothing to catch up, its downtime), kept while
  idle. An idle job teaches no capacity (0 > 0 fails every candidate), so without this rule it would fall
  through to ``max-scaleout``, and flap between two small scale-outs.
- ``max-scaleout``: nothing is valid: the most capacity there is, at the smallest scale-out that has it
  (within 1%; beyond it a hot key group's subtask or a vertex at its max parallelism gains nothing).
- ``surge``: the load of the last seconds left the forecast's upper bound and exceeds the current capacity:
  react now (also inside the stabilization window, `urgent`; between iterations the loop's surge watch
  runs one), to the smallest scale-out that carries that load (the higher of the last seconds' mean and
  the newest sample: right after a step the mean still holds the level before it), the next loop's upper
  bound and the backlog (with what piles up during the restart) drained within `surge_drain_s`.
- ``rescale-not-worth-it``: a smaller scale-out would carry the load, but the worker-seconds it saves over
  the time it stays valid do not pay for the rescale (its predicted downtime and replay at the new
  scale-out, plus the scale-out back when the forecast says the load returns within the horizon).
- ``rescale-budget``: with `max_rescales_per_h`, a smaller scale-out would carry the load but the last
  hour already holds the budget less one rescale: the scale-in waits, the last rescale stays free for a
  scale-out (scale-outs and surges are never held).

The capacity of a scale-out the job is not running is the model's prediction lowered by how far such
predictions have turned out too high (capacity/track_record.py). A candidate is valid when its capacity
exceeds the average load, its predicted recovery meets the target, it carries the forecast's upper
bound (`forecasting/interval.py`) until it would have recovered, and, with a lag SLO, a scale-out's
restart has the lag back within the SLO `lag_catch_up_s` after the job resumes. A reactive-mode scale-out
stops the job about as long as a 30 s SLO (new TaskManagers start); how long the lag then stays over it is
the excess times 1 / (1 − ρ), ρ the utilization right after the rescale, so the bound sets ρ (the Flink
operator's catch-up duration bounds the same thing). A scale-in's restart is shorter and, on the shared
traces, rarely crosses the SLO; bounding it too kept 8% more workers for 12% fewer seconds over the SLO.
Scaling in is skipped while the job still catches up (backlog larger than what the candidate processes in
one loop: records against records), and, with `max_scale_in_share`, into a scale-out below every one
measured that gives up more than that share of the running capacity.
"""

from __future__ import annotations

import math

import numpy as np

from mape.knowledge import Knowledge
from messages.types import CAPACITY_RESOLUTION, Assessment
from recovery.downtime import Direction, direction_of, replays

IDLE_RPS = 1.0
"""Below this average input (and forecast until the next loop) the job counts as idle."""


class ProactivePolicy:
    name = "foresail"

    def __init__(
        self,
        min_scaleout: int,
        max_scaleout: int,
        recovery_target_s: float,
        loop_interval_s: float,
        necessary_window_s: float = 600.0,
        surge_drain_s: float = 120.0,
        checkpoint_interval_s: float = 10.0,
        lag_catch_up_s: float = math.inf,
        max_rescales_per_h: float | None = None,
        scale_out_to_upper: bool = False,
        scale_out_at_checkpoint: bool = False,
        max_scale_in_share: float | None = None,
        surge_level_window_s: float | None = None,
    ) -> None:
        self.min_scaleout = min_scaleout
        self.max_scaleout = max_scaleout
        self.recovery_target_s = recovery_target_s
        self.loop_interval_s = loop_interval_s
        self.necessary_window_s = necessary_window_s
        self.surge_drain_s = surge_drain_s
        self.checkpoint_interval_s = checkpoint_interval_s
        self.lag_catch_up_s = lag_catch_up_s
        self.max_rescales_per_h = max_rescales_per_h
        self.scale_out_to_upper = scale_out_to_upper
        self.scale_out_at_checkpoint = scale_out_at_checkpoint
        self.max_scale_in_share = max_scale_in_share
        self.surge_level_window_s = (
            necessary_window_s
            if surge_level_window_s is None
            else min(necessary_window_s, surge_level_window_s)
        )

    def propose(self, assessment: Assessment, knowledge: Knowledge) -> tuple[int, str, tuple[str, ...]]:
        a = assessment
        forecast = planned_forecast(a)
        upper = forecast_upper(a, forecast)
        current = a.current_scaleout
        average = a.workload_avg_rps
        next_loop_max = forecast_peak(forecast, self.loop_interval_s)
        next_loop_upper = forecast_peak(upper, self.loop_interval_s)
        horizon_max = float(forecast.max())
        horizon_upper = float(upper.max())
        load = (
            f"average {average:.0f} rps, forecast max {next_loop_max:.0f} (upper {next_loop_upper:.0f}) "
            f"next loop / {horizon_max:.0f} horizon"
        )

        if _idle(average, next_loop_max, a.backlog_records, self.loop_interval_s):
            return self._idle(a, knowledge, load)
        surge = self.urgent(a, knowledge)
        if surge is not None:
            return surge

        since = math.inf if knowledge.last_rescale_s is None else a.time_s - knowledge.last_rescale_s
        capacity_now = a.capacity(current)
        recent = since < self.necessary_window_s
        level = self._surge_level(a, knowledge, min(average, next_loop_max)) if recent else None
        window_s = self.necessary_window_s if level is None else self.surge_level_window_s
        if since < window_s and capacity_now > average and capacity_now > next_loop_upper:
            return (
                current,
                "only-if-necessary",
                (
                    f"rescaled {since:.0f} s ago; capacity({current}) = {capacity_now:.0f} rps carries it",
                    load,
                ),
            )
        if level is not None:
            load = f"{load}; {level}"

        skipped: list[str] = []
        not_worth: list[str] = []
        budget_spent = knowledge.rescale_budget_spent(a.time_s, self.max_rescales_per_h)
        held_by_budget = False
        for scaleout in range(self.min_scaleout, self.max_scaleout + 1):
            capacity = a.planned_capacity(scaleout)
            if not capacity > average:
                continue
            recovery_s = a.recovery_s.get(scaleout, math.inf)
            if not 0 <= recovery_s <= self.recovery_target_s:  # NaN passed a plain `>`
                skipped.append(
                    f"{scaleout}: recovery {recovery_s:.0f} s > target {self.recovery_target_s:.0f} s"
                )
                continue
            until_recovered = forecast_peak(upper, recovery_s)
            if capacity < until_recovered:
                skipped.append(
                    f"{scaleout}: capacity {capacity:.0f} < forecast upper bound {until_recovered:.0f} until recovered"
                )
                continue
            over_slo_s = a.lag_catch_up_s.get(scaleout, 0.0) if scaleout > current else 0.0
            if over_slo_s > self.lag_catch_up_s:
                skipped.append(
                    f"{scaleout}: lag over the SLO {over_slo_s:.0f} s after the restart > {self.lag_catch_up_s:.0f} s"
                )
                continue
            chosen = f"capacity({scaleout}) = {capacity:.0f} rps{_lowered(a, scaleout)}, recovery {recovery_s:.0f} s"
            if scaleout == current:
                rule = "rescale-not-worth-it" if not_worth else "current-valid"
                if held_by_budget:
                    rule, not_worth = "rescale-budget", [budget_spent]
                return scaleout, rule, (chosen, load, *not_worth[-1:], *skipped[-3:])
            if scaleout < current and a.backlog_records > capacity * self.loop_interval_s:
                skipped.append(f"{scaleout}: still catching up (backlog {a.backlog_records:.0f} records)")
                continue
            if scaleout < current and budget_spent:
                held_by_budget = True
                continue
            too_far = self._gives_up_too_much(a, scaleout)
            if too_far:
                skipped.append(too_far)
                continue
            if scaleout < current:
                worth, why = self.scale_in_pays(a, knowledge, scaleout, forecast)
                if not worth:
                    not_worth.append(why)
                    continue
            to_upper = self.scale_out_to_upper and scaleout > current
            if capacity > (horizon_upper if to_upper else horizon_max):
                sized = (f"sized for the horizon's upper bound {horizon_upper:.0f} rps",) if to_upper else ()
                return scaleout, "long-lived", (chosen, load, *sized, *skipped[-3:])
        short = sum(
            1 for n in range(self.min_scaleout, self.max_scaleout + 1) if not a.planned_capacity(n) > average
        )
        most = a.most_capacity_scaleout(self.min_scaleout, self.max_scaleout) or self.max_scaleout
        beyond = f"the most capacity is at {most}"
        if most < self.max_scaleout:
            beyond = f"beyond {most} more workers add < {CAPACITY_RESOLUTION:.0%} capacity ({a.capacity(most):.0f} rps)"
        return (
            most,
            "max-scaleout",
            (
                f"no scale-out is valid: {beyond}",
                load,
                f"{short} scale-outs with capacity ≤ average",
                *skipped[-3:],
            ),
        )

    def _surge_level(self, a: Assessment, knowledge: Knowledge, load_rps: float) -> str | None:
        """Why the last rescale was a surge whose load holds (None when it was not): the median input rate
        since the surge (the plausibility ledger's samples, its last 600 s) and `load_rps` (the lower of
        the last loop's average and the forecast until the next) are both more than the scale-out before
        the surge carries. The median keeps a spike that comes as the window ends from passing for a
        level."""
        last = next(
            (d for d in reversed(knowledge.recent_decisions) if d.time_s == knowledge.last_rescale_s), None
        )
        if last is None or last.rule != "surge":
            return None
        before = a.capacity(last.current_scaleout)
        mostly = knowledge.plausibility.median_input_rps(last.time_s)
        if not (mostly > before and load_rps > before):
            return None
        return (
            f"the surge's load holds (median {mostly:.0f} rps since it > capacity({last.current_scaleout}) = "
            f"{before:.0f} before it): held {self.surge_level_window_s:.0f} s, not {self.necessary_window_s:.0f}"
        )

    def urgent(self, a: Assessment, knowledge: Knowledge) -> tuple[int, str, tuple[str, ...]] | None:
        """The surge rule: the recent load left the forecast's upper bound and the current capacity does
        not carry it. None when there is no surge (or no larger scale-out to go to)."""
        current, recent = a.current_scaleout, a.workload_recent_rps
        capacity_now = a.capacity(current)
        if not (math.isfinite(recent) and recent > capacity_now):
            return None
        expected = a.expected_upper_rps
        if math.isfinite(expected) and recent <= expected:
            return None  # foreseen: the regular rules handle it
        upper = forecast_upper(a, a.forecast_rps if a.forecast_rps is not None else np.array([recent]))
        now = a.surge_load_rps
        level = max(now, forecast_peak(upper, self.loop_interval_s))
        piled_up = a.backlog_records + now * (knowledge.downtime.estimate("out") + self._replay_s("out"))
        needed = level + piled_up / self.surge_drain_s
        target = next(
            (n for n in range(current + 1, self.max_scaleout + 1) if a.planned_capacity(n) >= needed),
            self.max_scaleout,
        )
        if target <= current:
            return None
        seen = "no earlier upper bound" if not math.isfinite(expected) else f"upper bound {expected:.0f}"
        return (
            target,
            "surge",
            (
                f"load {recent:.0f} rps over the last seconds > {seen} and > capacity({current}) = {capacity_now:.0f}",
                f"capacity({target}) = {a.planned_capacity(target):.0f} ≥ {needed:.0f} rps: {level:.0f} plus "
                f"{piled_up:.0f} records drained within {self.surge_drain_s:.0f} s",
            ),
        )

    def scale_in_pays(
        self, a: Assessment, knowledge: Knowledge, scaleout: int, forecast: np.ndarray
    ) -> tuple[bool, str]:
        """Whether scaling in to `scaleout` saves more worker-seconds than it costs.

        Saved: the workers released, for as long as the smaller scale-out carries the forecast (at most
        the horizon). Cost: the restart's downtime at the new scale-out plus the worker-seconds to replay
        what arrives meanwhile (downtime and `_replay_s`), and, when the forecast outgrows
        the smaller scale-out within the horizon, the same for the scale-out back. Expected values: the
        upper bound already guards the near term (the candidate must carry it until recovered)."""
        current = a.current_scaleout
        capacity = a.planned_capacity(scaleout)
        valid_s = carried_s(capacity, forecast)
        saved_ws = (current - scaleout) * valid_s
        rate = float(forecast[: max(1, math.ceil(valid_s))].mean())

        def restart_ws(direction: Direction, workers: int) -> float:
            downtime_s = knowledge.downtime.estimate(direction)
            per_worker_rps = a.capacity(workers) / workers
            if not per_worker_rps > 0:  # no rate to replay at (a capacity of 0): no restart pays
                return math.inf
            replay_ws = rate * (downtime_s + self._replay_s(direction)) / per_worker_rps
            return downtime_s * workers + replay_ws

        cost_ws = restart_ws("in", scaleout)
        outgrown = valid_s < len(forecast)
        back = " and back out" if outgrown else ""
        if outgrown:
            cost_ws += restart_ws("out", current)
        why = (
            f"{scaleout}: saves {saved_ws:.0f} worker-s over {valid_s:.0f} s, a rescale in{back} costs "
            f"{cost_ws:.0f}"
        )
        return saved_ws > cost_ws, why

    def _gives_up_too_much(self, a: Assessment, scaleout: int) -> str | None:
        """Why scaling in to `scaleout` gives up too much, or None: with `max_scale_in_share`, a scale-out
        below every one measured (its capacity extrapolated) may give up at most that share of the running
        capacity; the candidates are tried from the smallest up, so the first within it is taken. A rate per
        worker carried down from larger scale-outs over-promises for a job whose cost per record grows with
        the keys each subtask holds (a session window)."""
        share = self.max_scale_in_share
        if (
            share is None
            or scaleout >= a.current_scaleout
            or a.capacity_sources.get(scaleout) != "extrapolated"
        ):
            return None
        running_rps = a.capacity(a.current_scaleout)
        floor_rps = (1.0 - share) * running_rps
        if not a.planned_capacity(scaleout) < floor_rps:
            return None
        return (
            f"{scaleout}: never measured, and a scale-in gives up at most {share:.0%} of the running "
            f"{running_rps:.0f} rps (keeps {floor_rps:.0f})"
        )

    def _replay_s(self, direction: Direction) -> float:
        """Seconds of input a restart is expected to replay: half a checkpoint interval where it `replays`."""
        return self.checkpoint_interval_s / 2 if replays(direction, self.scale_out_at_checkpoint) else 0.0

    def _idle(self, a: Assessment, knowledge: Knowledge, load: str) -> tuple[int, str, tuple[str, ...]]:
        """The smallest scale-out whose restart recovers within the target; with no load and no backlog a
        restart only costs its downtime, which stands in where no recovery could be predicted (capacity 0)."""
        current = a.current_scaleout
        for scaleout in range(self.min_scaleout, self.max_scaleout + 1):
            recovery_s = a.recovery_s.get(scaleout, math.inf)
            if not math.isfinite(recovery_s):
                recovery_s = knowledge.downtime.estimate(direction_of(current, scaleout))
            if recovery_s <= self.recovery_target_s:
                return scaleout, "idle", (f"idle: {load}", f"{scaleout} recovers in {recovery_s:.0f} s")
        return (
            current,
            "idle",
            (f"idle: {load}", "no scale-out recovers within the target: keep the current one"),
        )


def _lowered(a: Assessment, scaleout: int) -> str:
    if scaleout == a.current_scaleout or a.capacity_overestimate == 1.0:
        return ""
    return (
        f" (predicted {a.capacity(scaleout):.0f} / {a.capacity_overestimate:.3f}, the model's track record)"
    )


def _idle(average_rps: float, next_loop_max_rps: float, backlog_records: float, interval_s: float) -> bool:
    """No load now or until the next loop, and no more waiting than an idle loop's worth of records."""
    return average_rps < IDLE_RPS and next_loop_max_rps < IDLE_RPS and backlog_records < IDLE_RPS * interval_s


def planned_forecast(a: Assessment) -> np.ndarray:
    """The per-second forecast the rules plan on; without one, the window's average load."""
    if a.forecast_rps is not None and len(a.forecast_rps):
        return np.asarray(a.forecast_rps, dtype=float)
    return np.array([a.workload_avg_rps])


def forecast_upper(a: Assessment, forecast: np.ndarray) -> np.ndarray:
    """The forecast's upper bound where the analysis has one (never below the forecast itself)."""
    upper = a.forecast_upper_rps
    if upper is None or len(upper) != len(forecast):
        return forecast
    return np.maximum(upper, forecast)


def carried_rps(a: Assessment, seconds: float) -> float:
    """The load a configuration must carry over the next `seconds`: the window's average or the forecast's
    upper bound over them, whichever is higher."""
    return max(a.workload_avg_rps, forecast_peak(forecast_upper(a, planned_forecast(a)), seconds))


def carried_s(capacity_rps: float, forecast: np.ndarray) -> float:
    """Seconds until the per-second forecast first exceeds `capacity_rps` (its whole length if never)."""
    above = np.flatnonzero(forecast > capacity_rps)
    return float(above[0]) if len(above) else float(len(forecast))


def forecast_peak(forecast: np.ndarray, seconds: float) -> float:
    """Highest forecast rate over the next `seconds` (at least the next second)."""
    if not math.isfinite(seconds):
        return float(forecast.max())
    return float(forecast[: max(1, math.ceil(seconds))].max())
