"""The configuration: one typed model, the single place where every option, default and meaning lives.

`config/example.yaml` is rendered from these declarations (`foresail config-example`), and a test
keeps the committed file in step with them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from config.backends import KubernetesConfig, LocalFlinkConfig, PrometheusConfig, ServerConfig
from config.policy_names import check_policy_name, parse_baseline

FLINK_MAX_PARALLELISM = 32_768
"""Flink's upper bound of a job's max parallelism (key groups): no target can run more workers."""
TWIN_MAX_PARALLELISM = 128
"""The digital twin's max parallelism (simulator/params.py `TwinParams.max_parallelism`; a test keeps them equal)."""


JOB_NECESSARY_WINDOW_S = 1_800.0
"""The only-if-necessary window at job granularity, where every rescale restarts the job."""
DAEDALUS_NECESSARY_WINDOW_S = 600.0
"""Daedalus's only-if-necessary window, kept where a rescale is a ~3 s per-vertex pause, and at job
granularity after a surge whose load holds (mape/proactive.py)."""

JOB_SURGE_DRAIN_S = 60.0
"""The surge rule's drain time at job granularity, where the surge's restart pauses the job ~30 s."""
VERTEX_SURGE_DRAIN_S = 120.0
"""The surge rule's drain time where a per-vertex rescale pauses ~3 s."""

DAY_S = 86_400.0
"""Upper bound of the loop's and the forecast's spans: beyond it a setting is a typo, and a loop of
`inf` seconds would never reach its first iteration."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class TargetConfig(Section):
    kind: Literal["twin", "prometheus+kubernetes", "prometheus+local-flink"] = Field(
        "twin",
        description="Where metrics come from and where scaling goes: the built-in digital twin, "
        "Prometheus + Kubernetes (real backends), or Prometheus + a local standalone Flink cluster "
        "whose TaskManager processes foresail starts and stops.",
    )
    recommend_only: bool = Field(
        False,
        description="Real targets: decide and log the scale-out, but never apply it (dry run).",
    )


class TwinConfig(Section):
    workload: str = Field(
        "builtin:sine",
        description="Trace the twin replays: 'builtin:sine' (two-period sine, 6 h) or a 'second|count' file.",
    )
    seed: int = Field(0, ge=0, description="Seed of every random draw in the twin (skew, noise, downtimes).")
    initial_scaleout: int | None = Field(
        None,
        ge=1,
        description="Workers the simulated job starts with; default = reference_scaleout "
        "clamped to the scaling bounds.",
    )
    reference_scaleout: int = Field(
        12,
        ge=1,
        le=TWIN_MAX_PARALLELISM,
        description="Sizing: this many workers carry the trace's peak with `headroom` to spare.",
    )
    headroom: float = Field(0.10, ge=0.0, le=5.0, description="Sizing headroom over the trace's peak rate.")
    speedup: float = Field(
        0.0,
        ge=0.0,
        le=10_000.0,
        description="Virtual seconds per wall second for `foresail run` (0.001 to 10,000); 0 = as fast as "
        "possible. Above ~600 an iteration (~50 ms) outlasts the loop's wall-time interval and the scheduler "
        "skips iterations, as a real daemon's would.",
    )
    scrape_interval_s: float = Field(5.0, gt=0, description="Step of the simulated Prometheus samples.")
    topology: str = Field(
        "single",
        description="Job graph of the simulated job: a shipped topology (single, wordcount, ysb, session, "
        "io-sink, hot-key; simulator/topologies/) or a YAML file of the same schema.",
    )
    latency_slo_s: float = Field(
        30.0,
        gt=0,
        description="Latency SLO for `seconds_over_slo` in reports (the plan keeps recovery.lag_slo_s).",
    )
    cpu_request_cores: float = Field(
        1.0,
        gt=0,
        description="CPU request of a simulated TaskManager container, what the HPA baselines divide its CPU "
        "usage by (Flink's kubernetes.taskmanager.cpu.amount default; deploy/ requests 1 core).",
    )
    cpu_limit_cores: float = Field(
        2.0,
        gt=0,
        description="CPU limit of a simulated TaskManager container: its CPU load (0..1, as Flink's "
        "Status.JVM.CPU.Load) is a share of it, so with a limit above the request a saturated worker shows "
        "more than 100 % of its request to the HPA (simulator/params.py).",
    )
    job_profile: Literal["stateless", "read-heavy", "write-heavy", "update-heavy"] = Field(
        "stateless",
        description="How the simulated job's keyed operator uses its RocksDB state (Justin §3, "
        "simulator/memory_model.py): 'stateless' (no state: memory changes nothing), 'read-heavy' "
        "(capacity rises with the cache / working-set ratio), 'write-heavy' (flat), 'update-heavy' "
        "(needs a minimum, then plateaus). The job starts at memory level 0.",
    )

    @field_validator("speedup")
    @classmethod
    def _speedup_runs(cls, speedup: float) -> float:
        if 0 < speedup < 0.001:  # a loop interval of 60 s would take over 16 hours of wall time
            raise ValueError(f"speedup {speedup:g} must be 0 (flat out) or at least 0.001")
        return speedup

    @model_validator(mode="after")
    def _request_within_limit(self) -> TwinConfig:
        if self.cpu_request_cores > self.cpu_limit_cores:
            raise ValueError(
                f"cpu_request_cores ({self.cpu_request_cores:g}) must be ≤ cpu_limit_cores "
                f"({self.cpu_limit_cores:g}), as Kubernetes requires"
            )
        return self


class LoopConfig(Section):
    interval_s: float = Field(
        60.0, ge=0.1, le=DAY_S, description="Seconds between MAPE-K iterations (0.1 s to a day)."
    )
    window_s: float | None = Field(
        None, gt=0, le=DAY_S, description="Metrics window each iteration reads; default = interval_s."
    )
    surge_watch_s: float | None = Field(
        10.0,
        ge=1.0,
        le=DAY_S,
        description="Between iterations, read the input rate alone this often; when two reads in a row see it "
        "above the last forecast's upper bound and the running capacity, and it no longer climbs, run an "
        "iteration at once (the plan's surge rule decides) instead of waiting up to interval_s. Quiet for "
        "interval_s after a rescale and for policies without a surge rule (the baselines, 'reactive'). "
        "A daemon that starts informed (a store a capacity plan seeded, or one it already ran on) runs its "
        "first iteration once two reads see the rate settled, not interval_s after its start. At least 1 s "
        "(Prometheus serves no newer sample sooner). Null: no watch.",
    )

    @property
    def effective_window_s(self) -> float:
        return self.window_s if self.window_s is not None else self.interval_s


class ScalingConfig(Section):
    policy: str = Field(
        "foresail",
        description="Plan policy. 'foresail': Daedalus's proactive search (forecast, recovery target, "
        "long-lived decisions) with Justin's memory levels for stateful jobs (section `memory`; a stateless "
        "job is planned exactly as by 'foresail-cpu-only' and only loses its unused managed memory when it "
        "scales out). 'foresail-cpu-only': the same search on scale-out alone, memory never changed. "
        "'reactive': smallest scale-out whose capacity exceeds the observed average "
        "workload plus the backlog to drain. Baselines for comparison (knobs under `baselines`; the main knob "
        "may be given in the name): 'static' or 'static-N' (fixed scale-out N), 'hpa-P' (Kubernetes HPA on "
        "CPU, target P % of the CPU request, e.g. 'hpa-80'), 'flink-operator' or 'flink-operator-uU' (Flink "
        "Kubernetes Operator autoscaler, utilization target U), 'ds2' or 'ds2-rR' (true-rate scaling, target "
        "rate R × the source rate).",
    )
    min_scaleout: int = Field(
        1, ge=1, le=FLINK_MAX_PARALLELISM, description="Never scale below this many workers."
    )
    max_scaleout: int = Field(
        18, ge=1, le=FLINK_MAX_PARALLELISM, description="Never scale above this many workers."
    )
    stabilization_s: float = Field(180.0, ge=0, description="No new action this long after a rescale.")
    max_rescales_per_h: float | None = Field(
        None,
        gt=0,
        description="foresail plan: a rescale budget. Once the last hour holds this many rescales less "
        "one, scale-ins wait (the last one stays free for a scale-out the load needs; scale-outs and surges "
        "are never held), named `rescale-budget` (`vertex-rescale-budget` per vertex) in the audit log; per "
        "vertex, scale-outs are then sized for the horizon's peak. Fewer restarts for more workers; 1 never "
        "scales in; null: no budget.",
    )
    max_scale_in_share: float | None = Field(
        None,
        gt=0,
        le=1,
        description="foresail plan: the largest share of the running capacity one scale-in into a "
        "configuration never measured gives up (job granularity: a scale-out below every one measured; "
        "vertex granularity: a vertex at a parallelism never seen; the Flink operator's "
        "scale-down.max-factor is 0.6); further scale-ins follow loop by loop. A rate carried over from "
        "another scale-out may over-promise (a session window's cost grows with the keys each subtask "
        "holds). null: no limit.",
    )
    size_scale_outs_for: Literal["forecast", "upper-bound"] = Field(
        "forecast",
        description="foresail plan (job granularity): what a `long-lived` scale-out carries over the "
        "horizon: the forecast (Daedalus's rule) or its upper bound (forecasting/interval.py). A reactive-"
        "mode scale-out stops the job about as long as the SLO, a scale-in about half as long: 'upper-bound' "
        "pays that restart once on a rising load instead of in steps, for more workers until the next "
        "scale-in.",
    )
    drain_time_s: float = Field(
        300.0, gt=0, description="Reactive plan: the backlog must drain within this time on top of the load."
    )
    reactive_headroom: float = Field(
        0.0,
        ge=0,
        description="Reactive plan: capacity must exceed (1 + headroom) × the load it needs, like a target "
        "utilization of 1 / (1 + headroom); 0 runs the workers up to their capacity.",
    )
    necessary_window_s: float | None = Field(
        None,
        ge=0,
        description="foresail plan: within this time after a rescale, keep the scale-out while it "
        "carries the average load and the forecast until the next loop (rescale only if necessary). "
        "null: by granularity, 1,800 s at job granularity (a reactive-mode rescale restarts the job and "
        "pauses it about as long as a 30 s lag SLO: half the rescales of Daedalus's 600 s for ~13% more "
        "workers, README) and Daedalus's 600 s at vertex granularity (a per-vertex rescale pauses ~3 s).",
    )
    surge_drain_s: float | None = Field(
        None,
        gt=0,
        description="foresail plan, surge rule: when the load leaves the forecast's upper bound and exceeds "
        "the capacity, scale out to carry it and drain the backlog (and what piles up during the restart) "
        "within this time; also inside the stabilization window. null: by granularity, 60 s at job "
        "granularity (the restart pauses the job ~30 s, and the lag stays over the SLO until that backlog "
        "is drained: on the step-surge and spike shapes 120 s spent 26% more seconds over it, docs/evaluation/family.md) "
        "and 120 s at vertex granularity (a ~3 s pause).",
    )
    objective: Literal["recovery", "latency"] = Field(
        "recovery",
        description="foresail plan: 'recovery' plans the smallest scale-out that carries the load and "
        "recovers within recovery.target_s (Daedalus); 'latency' also needs the mean end-to-end latency, "
        "from Elasticutor's queueing model with a correction learned from the latency the job shows, to "
        "stay within latency_target_ms over the forecast horizon (the recovery bound still applies).",
    )
    latency_target_ms: float = Field(
        2000.0,
        gt=0,
        description="End-to-end latency the 'latency' objective plans for (its mean or p99: "
        "latency_target_stat).",
    )
    latency_target_stat: Literal["mean", "p99"] = Field(
        "mean",
        description="What latency_target_ms bounds: the mean latency, or its 99th percentile over a loop "
        "window. The queueing model gives means; for p99 the correction it learns from the latency the job "
        "shows maps the model's mean to the window's p99 (a stored correction of the other statistic is "
        "dropped).",
    )
    granularity: Literal["job", "vertex"] = Field(
        "job",
        description="job: reactive mode, every vertex at the job's scale-out (one TaskManager per worker). "
        "vertex: the adaptive scheduler; the plan decides every vertex's parallelism and the TaskManagers "
        "that carry them (slots = the largest vertex parallelism per slot-sharing group, summed over groups; "
        "TaskManagers = ceil(slots / slots_per_taskmanager)), rescaled through Flink's REST API in one step. "
        "min/max_scaleout then bound the TaskManagers. 'foresail', 'ds2' and 'flink-operator' plan per "
        "vertex; other policies set every vertex to their scale-out.",
    )
    slots_per_taskmanager: int = Field(
        1,
        ge=1,
        description="vertex granularity: task slots of one TaskManager (taskmanager.numberOfTaskSlots). The "
        "twin runs one slot (one core) per TaskManager.",
    )
    slot_sharing_groups: dict[str, str] = Field(
        default_factory=dict,
        description="vertex granularity: vertex name → slot-sharing group; vertices not named share the "
        "'default' group (Flink's default: every vertex in one group).",
    )
    subtask_price: float = Field(
        0.0,
        ge=0,
        description="vertex granularity: price of one subtask (its threads, buffers, per-subtask overhead) "
        "relative to one TaskManager; above 0 a vertex is scaled down on its own when the subtasks it sheds "
        "outweigh a restart's cost, at 0 only when that saves slots or rides along with a rescale that "
        "happens anyway.",
    )
    rescale_price_ws: float = Field(
        0.0,
        ge=0,
        description="foresail plan, vertex granularity: the TaskManager-seconds one rescale is worth "
        "avoiding (each pauses the job and restores its state). Above 0 a scale-in waits while the "
        "TaskManagers it saves (or the subtasks it sheds at subtask_price) over the forecast horizon are worth "
        "less (`vertex-rescale-not-worth-it`; a dead band: with 1,200 and a 900 s horizon a scale-in of one "
        "TaskManager is never made), and "
        "a scale-out is sized for the forecast peak of the lookahead (from the next decision's to the "
        "horizon's) that starts the cheapest sequence of rescales over the horizon (each later one at this "
        "price). 1,200 took issue 16's "
        "17 loads from 4.6 to 3.6 rescales an hour for 3% more workers (3 seeds, docs/evaluation/family.md). 0: "
        "every rescale that saves a slot is made.",
    )

    def _by_granularity(self, chosen: float | None, job: float, vertex: float) -> float:
        """A setting whose null means a default by granularity (a rescale restarts the job, or pauses it ~3 s)."""
        if chosen is not None:
            return chosen
        return job if self.granularity == "job" else vertex

    @property
    def effective_surge_drain_s(self) -> float:
        return self._by_granularity(self.surge_drain_s, JOB_SURGE_DRAIN_S, VERTEX_SURGE_DRAIN_S)

    @property
    def effective_necessary_window_s(self) -> float:
        return self._by_granularity(
            self.necessary_window_s, JOB_NECESSARY_WINDOW_S, DAEDALUS_NECESSARY_WINDOW_S
        )

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, name: str) -> str:
        return check_policy_name(name)

    @model_validator(mode="after")
    def _bounds_ordered(self) -> ScalingConfig:
        if self.max_scaleout < self.min_scaleout:
            raise ValueError(
                f"max_scaleout ({self.max_scaleout}) must be ≥ min_scaleout ({self.min_scaleout})"
            )
        static = parse_baseline(self.policy)
        fixed = static.knob if static is not None and static.family == "static" else None
        if fixed is not None and not self.min_scaleout <= fixed <= self.max_scaleout:
            raise ValueError(
                f"policy {self.policy!r} lies outside min_scaleout..max_scaleout "
                f"({self.min_scaleout}..{self.max_scaleout}): it would run at the bound, not at its name"
            )
        return self


class RecoveryConfig(Section):
    target_s: float = Field(600.0, gt=0, description="Recovery-time target a scale-out must meet.")
    lag_slo_s: float | None = Field(
        30.0,
        gt=0,
        description="foresail plan: the lag (seconds the oldest waiting record has waited) the job is to "
        "keep; a scale-out is valid only when its restart's lag is back within it within lag_catch_up_s of "
        "the job resuming. Null: no lag SLO (Daedalus's recovery target alone).",
    )
    lag_catch_up_s: float = Field(
        20.0,
        ge=0,
        description="foresail plan: the longest the lag may stay over lag_slo_s after a scale-out's "
        "restart resumes. A restart that stops the job about as long as the SLO (reactive mode: ~30 s) "
        "leaves it over the SLO for 1 / (1 - utilization) times the excess: this bounds the utilization "
        "right after a scale-out.",
    )
    anomaly_k: float = Field(
        2.5,
        gt=0,
        description="Observed recovery: (workload - throughput) is anomalous beyond k standard deviations of "
        "its normal behaviour. Daedalus used 1; on the recorded Flink rescale the throughput meter lags the "
        "workload by ~14 s, and k=1 reported recovery at 391 s where the data show 68 s (k=2.5 finds 68 s).",
    )
    observe_timeout_s: float = Field(
        1800.0,
        gt=0,
        description="Stop watching a rescale that has not recovered after this long (recorded as "
        "not recovered).",
    )
    downtime_window: int = Field(
        20, ge=1, description="Observed downtimes per direction the robust (median) estimate is taken over."
    )
    checkpoint_interval_s: float = Field(
        10.0, gt=0, description="Job's checkpoint interval (replay on restart), seconds."
    )
    scale_out_at_checkpoint: bool = Field(
        False,
        description="The job runs on Flink >= 2.0, whose adaptive scheduler (FLIP-461) rescales onto an "
        "added TaskManager only when a checkpoint has just completed (waiting at most "
        "jobmanager.adaptive-scheduler.rescale-trigger.max-delay, by default three checkpoint intervals): "
        "a scale-out replays nothing, and the plan predicts its restart without replay. A scale-in (a "
        "TaskManager removed) and a memory change (every TaskManager replaced) are failovers from the last "
        "checkpoint either way. False: Flink 1.x, which rolls back to the last periodic checkpoint. The twin's "
        "scale-outs follow this setting. Measured on the twin's Flink 2.x restarts, off served better at the "
        "same workers (the replay it assumes is a margin for the restart's spread); `check-config` notes "
        "it when on.",
    )
    downtime_out_s: float = Field(30.0, ge=0, description="Initial downtime estimate when scaling out.")
    downtime_in_s: float = Field(15.0, ge=0, description="Initial downtime estimate when scaling in.")
    vertex_downtime_s: float = Field(
        3.0,
        ge=0,
        description="Initial downtime estimate of a per-vertex rescale (scaling.granularity: vertex), learned "
        "from the rescales the execute side measures (request to every vertex running at its target): "
        "3.0-3.2 s measured on Flink 2.3 outside the adaptive scheduler's cooldown (README: per-vertex parallelism).",
    )


class ForecastConfig(Section):
    horizon_s: float = Field(
        900.0, gt=0, le=DAY_S, description="How far ahead the workload is forecast (at most a day)."
    )
    resolution_s: float = Field(
        10.0, gt=0, description="Step the ARIMA model works at; forecasts are interpolated to seconds."
    )
    min_history_s: float = Field(1800.0, gt=0, description="History the first ARIMA fit waits for.")
    max_history_s: float = Field(
        7200.0,
        gt=0,
        description="Most recent history the model is fitted and updated on: update() refits over all of it, "
        "so this bounds the per-iteration cost (about 40-70 ms at 2 h of 10 s buckets here).",
    )

    wape_threshold: float = Field(
        0.25, gt=0, description="Forecast WAPE above which the linear fallback is used for an iteration."
    )
    retrain_after_poor: int = Field(
        15,
        ge=1,
        description="Consecutive iterations over the WAPE threshold that trigger a background retrain.",
    )
    linear_window_s: float = Field(600.0, gt=0, description="History the linear-trend fallback is fitted on.")
    seasonal_period_s: float | Literal["auto"] | None = Field(
        "auto",
        description="Seasonality: null (none), a period in seconds, or 'auto' (the strongest autocorrelation "
        "peak of the fitted history, looked for again every 10 loops until one is found, and kept only where "
        "its Fourier terms lower the fit's AICc).",
    )
    upper_quantile: float = Field(
        0.9,
        gt=0,
        lt=1,
        description="The forecast's upper bound: this quantile of the recent peak errors per lead minute "
        "(realized peak / forecast peak over the last hour of forecasts); the plan keeps the near term "
        "(until a rescale would have recovered) under it.",
    )
    fit_timeout_s: float = Field(300.0, gt=0, description="A background fit taking longer is abandoned.")
    max_interpolated_gap_s: float = Field(
        120.0,
        ge=0,
        description="Gaps in the input rate up to this long are interpolated; longer ones hold the "
        "last value (neither counts as observed for WAPE or the fallback).",
    )
    fourier_order: int = Field(
        2, ge=1, description="Sine/cosine pairs per seasonal period (exogenous terms)."
    )
    registry_path: str | None = Field(
        None,
        description="Model registry written by `foresail retrain`: the forecaster starts from its job's "
        "newest model and swaps in newer versions between iterations (null = no registry).",
    )
    registry_job: str | None = Field(
        None,
        description="This job's name in the registry and in exported histories (required with registry_path).",
    )
    registry_poll_s: float = Field(
        300.0, gt=0, description="How often (loop time) the registry is checked for a newer model version."
    )

    @field_validator("seasonal_period_s")
    @classmethod
    def _positive_period(cls, period_s: float | str | None) -> float | str | None:
        if isinstance(period_s, float) and not period_s > 0:
            raise ValueError("a seasonal period must be > 0 s, 'auto' or null")
        return period_s

    @model_validator(mode="after")
    def _history_ordered(self) -> ForecastConfig:
        if self.min_history_s > self.max_history_s:
            raise ValueError(
                f"min_history_s ({self.min_history_s:g}) must be ≤ max_history_s ({self.max_history_s:g})"
            )
        return self

    @model_validator(mode="after")
    def _registry_needs_job(self) -> ForecastConfig:
        if self.registry_path is not None and not self.registry_job:
            raise ValueError("registry_job must name the job when registry_path is set")
        return self


class CapacityConfig(Section):
    model: Literal["dag", "job"] = Field(
        "dag",
        description="dag: where Flink's per-vertex task metrics exist, each scale-out's capacity is the "
        "smaller of the vertices' true processing rates (DS2) and each TaskManager's core (its subtasks' busy "
        "time at the CPU a busy second costs), and the bottleneck vertex is named; job: the per-worker CPU "
        "lines alone.",
    )
    saturation_cpu: float = Field(
        0.95,
        gt=0,
        le=1.0,
        description="CPU load a worker sustains when saturated (0.93-0.98 in the recorded "
        "Flink runs); the observed maximum is used when higher.",
    )
    idle_cpu: float = Field(
        0.11,
        ge=0,
        lt=1,
        description="CPU load of an idle worker (JVM floor; 0.11 in the recorded ramp): a "
        "worker whose own slope is not yet determined gets the line through (idle_cpu, 0) and its means.",
    )
    min_points: int = Field(6, ge=2, description="Samples a worker needs before its own slope is trusted.")
    min_cpu_std: float = Field(
        0.05, ge=0, description="CPU spread (std) a worker's samples need before its own slope is trusted."
    )
    min_slope_t: float = Field(
        10.0,
        gt=0,
        description="t-statistic a slope needs to be trusted (samples are autocorrelated: keep high).",
    )
    saturated_backlog_s: float = Field(
        30.0,
        gt=0,
        description="A backlog above this many seconds of throughput means the job runs at its "
        "capacity: its throughput is taken as the capacity and its samples are not fed to the lines.",
    )
    warmup_s: float = Field(120.0, ge=0, description="Samples this soon after a (re)start are ignored.")
    observed_smoothing: float = Field(
        0.3, gt=0, le=1, description="EWMA weight of the newest capacity estimate of a seen scale-out."
    )
    estimate_min_cpu: float = Field(
        0.4,
        ge=0,
        le=1,
        description="Below this CPU on the hottest worker, lines extrapolate too far: a "
        "capacity already learned for the scale-out is used instead of the fresh estimate.",
    )
    worker_retention_s: float = Field(
        3600.0, gt=0, description="A worker unseen this long is retired; its slope stays in the pooled one."
    )

    @model_validator(mode="after")
    def _idle_below_saturation(self) -> CapacityConfig:
        if self.idle_cpu >= self.saturation_cpu:
            raise ValueError(
                f"idle_cpu ({self.idle_cpu:g}) must be below saturation_cpu ({self.saturation_cpu:g}): an idle "
                "worker at or above its saturated CPU leaves no range for its throughput"
            )
        return self


class BaselinesConfig(Section):
    """Knobs of the baseline policies; defaults are the paper's setup and each system's documented defaults."""

    static_scaleout: int = Field(
        12, ge=1, description="static: the fixed scale-out (the paper's 12 workers)."
    )
    hpa_sync_period_s: float = Field(
        15.0,
        ge=0.1,
        le=DAY_S,
        description="hpa-*: seconds between HPA evaluations (the loop runs this often for them; 0.1 s to a "
        "day, as loop.interval_s).",
    )
    hpa_tolerance: float = Field(
        0.1, ge=0, description="hpa-*: no change while |CPU / target - 1| is within this tolerance."
    )
    hpa_scale_down_window_s: float = Field(
        300.0,
        ge=0,
        description="hpa-*: scale-down stabilization window; scale in only to the highest recommendation in it.",
    )
    operator_target_utilization: float = Field(
        0.7, gt=0, le=1, description="flink-operator: job.autoscaler.utilization.target."
    )
    operator_utilization_boundary: float = Field(
        0.3,
        ge=0,
        le=1,
        description="flink-operator: job.autoscaler.target.utilization.boundary; no rescale while the "
        "true processing rate lies within the band it spans.",
    )
    operator_restart_time_s: float = Field(
        300.0,
        ge=0,
        description="flink-operator: job.autoscaler.restart.time, counted in the capacity target.",
    )
    operator_catch_up_duration_s: float = Field(
        1800.0,
        ge=0,
        description="flink-operator: job.autoscaler.catch-up.duration to work off lag and restart backlog.",
    )
    operator_metrics_window_s: float = Field(
        900.0, gt=0, description="flink-operator: job.autoscaler.metrics.window averaged before deciding."
    )
    operator_stabilization_interval_s: float = Field(
        300.0,
        ge=0,
        description="flink-operator: job.autoscaler.stabilization.interval without metrics after a rescale.",
    )
    operator_scale_down_interval_s: float = Field(
        3600.0,
        ge=0,
        description="flink-operator: job.autoscaler.scale-down.interval a scale-down is delayed by.",
    )
    operator_scale_down_max_factor: float = Field(
        0.6,
        ge=0,
        le=1,
        description="flink-operator: job.autoscaler.scale-down.max-factor (share of the parallelism one "
        "scale-down may remove).",
    )
    ds2_target_ratio: float = Field(
        1.0,
        gt=0,
        description="ds2: target rate as a multiple of the observed source rate (the paper used 1.0).",
    )
    ds2_decision_interval_s: float | None = Field(
        None,
        ge=0.1,
        le=DAY_S,
        description="ds2 (vertex granularity): DS2's policy interval, seconds between decisions (DS2 §4.2: "
        "5-30 s on Flink, 60 s on Heron); default loop.interval_s.",
    )
    ds2_activation_intervals: int = Field(
        1,
        ge=1,
        description="ds2 (vertex granularity): activation time, consecutive policy decisions considered "
        "before a rescale; the highest parallelism per operator among them is applied (DS2 §4.2: 1 in the "
        "Heron and Flink runs, 5 in the convergence runs).",
    )
    ds2_warmup_intervals: int = Field(
        1,
        ge=0,
        description="ds2 (vertex granularity): policy intervals ignored after a rescale (DS2 §4.2 warm-up).",
    )
    ds2_scaling_factor: float = Field(
        1.0,
        gt=0,
        description="ds2 (vertex granularity): each operator's computed parallelism is multiplied by this "
        "before rounding up (1.0: DS2's exact model; more over-provisions against uncaptured overheads).",
    )
    ds2_min_change: int = Field(
        1,
        ge=0,
        description="ds2: changes of an operator's parallelism (of the workers, at job granularity) by at "
        "most this much are ignored as metric noise, unless the job falls behind (DS2 §4.2 'ignores minor "
        "changes').",
    )
    operator_scale_up_max_factor: float = Field(
        100000.0,
        gt=0,
        description="flink-operator: job.autoscaler.scale-up.max-factor (share of the parallelism one "
        "scale-up may add).",
    )


class MemoryConfig(Section):
    """Memory levels and the thresholds of Justin's hybrid scaling (policy 'foresail', stateful jobs)."""

    base_mb: float = Field(
        158.0,
        gt=0,
        description="Managed memory per slot at level 0; level x gives 2^x times it (Justin: 158 MB, "
        "the default share of a 2 GB, 4-slot TaskManager; 128 MB in its microbenchmarks).",
    )
    max_level: int = Field(3, ge=0, le=8, description="Highest memory level (Justin's maxLevel).")
    hit_rate_threshold: float = Field(
        0.8,
        ge=0,
        le=1,
        description="Δθ: a block-cache hit rate below this is memory pressure (a scale-up may help).",
    )
    latency_threshold_ms: float = Field(
        1.0,
        gt=0,
        description="Δτ: a state-access latency above this is memory pressure (reads hit the disk).",
    )
    min_hit_rate_gain: float = Field(
        0.01,
        ge=0,
        le=1,
        description="A scale-up 'improved' the hit rate when it rose by at least this much (absolute); "
        "Justin's hysteresis against noise.",
    )
    min_latency_gain: float = Field(
        0.05,
        ge=0,
        lt=1,
        description="A scale-up 'improved' the state latency when it fell by at least this fraction.",
    )
    switch_min_saving: float = Field(
        0.10,
        ge=0,
        lt=1,
        description="Moving to another memory level for its lower price needs this relative saving over "
        "the plan at the current level (its capacities are less certain, and leaving a configuration that "
        "holds costs a restart).",
    )
    cpu_price_per_core: float = Field(
        1.0, ge=0, description="Price of one CPU core per unit of time (relative; only ratios matter)."
    )
    memory_price_per_gb: float = Field(
        0.11,
        ge=0,
        description="Price of one GB of TaskManager memory per unit of time, same unit (AWS Fargate's "
        "per-GB-hour over per-vCPU-hour price: 0.004445 / 0.04048).",
    )
    process_base_mb: float = Field(
        1890.0,
        gt=0,
        description="TaskManager process memory besides managed memory (heap, network, framework, JVM "
        "overhead): the container gets this plus the level's managed memory (the deployment's 2 GiB "
        "TaskManager less its 158 MB managed memory).",
    )
    cores_per_worker: float = Field(1.0, gt=0, description="CPU cores of one worker (TaskManager, one slot).")
    release_stateless: bool = Field(
        True,
        description="A job without stateful operators gives up its managed memory when it next scales out. "
        "Statefulness is read from RocksDB and state-latency metrics: enable them in Flink "
        "(state.backend.rocksdb.metrics.block-cache-hit/-miss, state.latency-track.keyed-state-enabled), or a "
        "stateful job looks stateless.",
    )


class KnowledgeConfig(Section):
    path: str = Field(
        "foresail-knowledge.sqlite",
        description="SQLite file with the persisted knowledge (':memory:' = none).",
    )
    decision_history: int = Field(
        10000,
        ge=1,
        le=100_000_000,
        description="Decisions kept in the store (oldest dropped); the same cap holds the journals of observed "
        "recoveries and memory reconfigurations.",
    )


class LoggingConfig(Section):
    level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")
    format: Literal["json", "console"] = Field("json", description="Audit/log output format on stdout.")


class Config(Section):
    target: TargetConfig = TargetConfig()
    twin: TwinConfig = TwinConfig()
    loop: LoopConfig = LoopConfig()
    scaling: ScalingConfig = ScalingConfig()
    baselines: BaselinesConfig = BaselinesConfig()
    recovery: RecoveryConfig = RecoveryConfig()
    forecast: ForecastConfig = ForecastConfig()
    capacity: CapacityConfig = CapacityConfig()
    memory: MemoryConfig = MemoryConfig()
    knowledge: KnowledgeConfig = KnowledgeConfig()
    logging: LoggingConfig = LoggingConfig()
    prometheus: PrometheusConfig = PrometheusConfig()
    kubernetes: KubernetesConfig = KubernetesConfig()
    local_flink: LocalFlinkConfig = LocalFlinkConfig()
    server: ServerConfig = ServerConfig()

    @property
    def twin_initial_scaleout(self) -> int:
        start = self.twin.initial_scaleout or self.twin.reference_scaleout
        return min(max(start, self.scaling.min_scaleout), self.scaling.max_scaleout)

    @model_validator(mode="after")
    def _rules_across_sections(self) -> Config:
        """Every broken rule at once (one validator each would stop at the first)."""
        problems = [
            problem
            for rule in (
                self._scaleouts_the_twin_can_run,
                self._static_scaleout_within_bounds,
                self._vertex_granularity_needs_the_vertex_model,
                self._latency_objective_needs_the_vertex_model,
                self._twin_runs_one_slot_per_taskmanager,
                self._twin_start_within_bounds,
            )
            if (problem := rule()) is not None
        ]
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def _scaleouts_the_twin_can_run(self) -> str | None:
        if self.target.kind == "twin" and self.scaling.max_scaleout > TWIN_MAX_PARALLELISM:
            return (
                f"scaling.max_scaleout ({self.scaling.max_scaleout}) exceeds what the twin can run "
                f"(max parallelism {TWIN_MAX_PARALLELISM})"
            )
        return None

    def _static_scaleout_within_bounds(self) -> str | None:
        """Plain 'static' runs at baselines.static_scaleout: refused outside the bounds, as 'static-N' is."""
        static = parse_baseline(self.scaling.policy)
        if static is None or static.family != "static" or static.knob is not None:
            return None
        n, low, high = self.baselines.static_scaleout, self.scaling.min_scaleout, self.scaling.max_scaleout
        if not low <= n <= high:
            return (
                f"policy 'static' runs at baselines.static_scaleout ({n}), outside scaling.min_scaleout.."
                f"max_scaleout ({low}..{high}): it would run at the bound, not at static_scaleout"
            )
        return None

    def _vertex_granularity_needs_the_vertex_model(self) -> str | None:
        if self.scaling.granularity == "vertex" and self.capacity.model != "dag":
            return "scaling.granularity: vertex plans from the per-vertex true rates: set capacity.model: dag"
        return None

    def _latency_objective_needs_the_vertex_model(self) -> str | None:
        if self.scaling.objective == "latency" and self.capacity.model != "dag":
            return (
                "scaling.objective: latency queues records at each vertex's true rate, which only the per-vertex "
                "model learns: set capacity.model: dag"
            )
        return None

    def _twin_runs_one_slot_per_taskmanager(self) -> str | None:
        if self.target.kind == "twin" and self.scaling.slots_per_taskmanager != 1:
            return "scaling.slots_per_taskmanager: the twin runs one slot (one core) per TaskManager; set 1"
        return None

    def _twin_start_within_bounds(self) -> str | None:
        start = self.twin.initial_scaleout
        if start is not None and not (self.scaling.min_scaleout <= start <= self.scaling.max_scaleout):
            return (
                f"twin.initial_scaleout ({start}) must lie within scaling.min_scaleout.."
                f"max_scaleout ({self.scaling.min_scaleout}..{self.scaling.max_scaleout})"
            )
        return None


def example_path() -> Path:
    return Path(__file__).with_name("example.yaml")
