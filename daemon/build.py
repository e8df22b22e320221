"""Assembling the loop from the config: policy, plan guards, analysis, and the twin backend."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import structlog

from capacity.dag import DagSettings
from capacity.model import CapacitySettings
from config.load import ConfigError
from config.schema import DAEDALUS_NECESSARY_WINDOW_S, Config
from forecasting.registry import RegistrySource
from forecasting.types import ForecastSettings
from mape.analyze import Analyzer
from mape.extensions import AnalysisExtension
from mape.interfaces import MetricsSource, ScalingTarget
from mape.knowledge import Knowledge, KnowledgeSettings
from mape.knowledge_store import KnowledgeStore
from mape.latency_policy import (
    LATENCY,
    LatencyKnowledge,
    LatencyLearning,
    LatencyObjective,
    VertexLatencyObjective,
)
from mape.loop import MapeLoop
from mape.plan import GuardedPlan, Policy
from mape.proactive import ProactivePolicy
from mape.reactive import ReactivePolicy
from mape.skew import SKEW, SkewKnowledge, SkewWatch
from mape.vertex_knowledge import VERTEX, VertexKnowledge, VertexWatch
from mape.vertex_plan import VertexPolicy
from memory.analysis import MemoryAnalysis
from memory.cost import Prices
from memory.knowledge import MEMORY, MemoryKnowledge
from memory.levels import MemoryLevels
from memory.policy import MemoryAwarePolicy, MemorySettings
from simulator.baselines import is_baseline, make_baseline
from simulator.metrics import TwinMetricsSource, TwinScalingTarget
from simulator.params import TwinParams
from simulator.shapes import shape_rates
from simulator.topology import Topology, TopologyError, load_topology
from simulator.twin import Twin
from simulator.workload import builtin_sine, load_trace

REGISTRY_KEYS = {"registry_path", "registry_job", "registry_poll_s"}


def registry_source(config: Config) -> RegistrySource | None:
    """The model registry the forecaster polls (forecast.registry_path), or None without one."""
    forecast = config.forecast
    if forecast.registry_path is None:
        return None
    return RegistrySource(
        forecast.registry_path, forecast.registry_job, forecast.resolution_s, forecast.registry_poll_s
    )


def knowledge_settings(
    config: Config, executor: Callable[[], Executor | None] = lambda: None
) -> KnowledgeSettings:
    """How the learned models are built; `executor` makes the executor of off-loop work (None = threads)."""
    recovery = config.recovery
    capacity = CapacitySettings(**config.capacity.model_dump(exclude={"saturated_backlog_s", "model"}))
    extensions = {}
    if memory_levels(config) is not None:
        extensions[MEMORY] = lambda data: MemoryKnowledge.from_dict(data, capacity)
    if config.capacity.model == "dag":
        extensions[SKEW] = SkewKnowledge.from_dict
    if latency_objective(config):
        extensions[LATENCY] = LatencyKnowledge.from_dict
    if per_vertex(config):
        extensions[VERTEX] = lambda data: VertexKnowledge.from_dict(
            data, recovery.vertex_downtime_s, recovery.downtime_window
        )
    return KnowledgeSettings(
        capacity=capacity,
        dag=DagSettings(warmup_s=config.capacity.warmup_s),
        forecast=ForecastSettings(
            **config.forecast.model_dump(exclude=REGISTRY_KEYS), loop_interval_s=loop_interval_s(config)
        ),
        model_source=lambda: registry_source(config),
        downtime_out_s=recovery.downtime_out_s,
        downtime_in_s=recovery.downtime_in_s,
        downtime_window=recovery.downtime_window,
        anomaly_k=recovery.anomaly_k,
        observe_timeout_s=recovery.observe_timeout_s,
        executor=executor,
        extension_factories=extensions,
    )


def per_vertex(config: Config) -> bool:
    """Whether the plan decides every vertex's parallelism (scaling.granularity: vertex)."""
    return config.scaling.granularity == "vertex"


def memory_levels(config: Config) -> MemoryLevels | None:
    """The memory levels of a memory-aware policy ('foresail' at job granularity); None for every other."""
    if config.scaling.policy != "foresail" or per_vertex(config):
        return None
    return MemoryLevels(config.memory.base_mb, config.memory.max_level)


def latency_objective(config: Config) -> bool:
    """Whether the foresail plan works to a latency target (scaling.objective: latency)."""
    return config.scaling.objective == "latency" and config.scaling.policy in (
        "foresail",
        "foresail-cpu-only",
    )


def analysis_extensions(config: Config) -> tuple[AnalysisExtension, ...]:
    """The analysis extensions: the memory-aware analysis for 'foresail', the skew watch with the per-vertex
    model, the latency model's correction with the latency objective."""
    levels = memory_levels(config)
    extensions: list[AnalysisExtension] = []
    if levels is not None:
        extensions.append(
            MemoryAnalysis(
                levels,
                config.scaling.max_scaleout,
                config.recovery.checkpoint_interval_s,
                config.recovery.lag_slo_s,
            )
        )
    if config.capacity.model == "dag":
        extensions.append(SkewWatch())
    if latency_objective(config):
        extensions.append(LatencyLearning(config.scaling.latency_target_stat))
    if per_vertex(config):
        extensions.append(VertexWatch(config.capacity.idle_cpu, config.capacity.saturation_cpu))
    return tuple(extensions)


def prices(config: Config) -> Prices:
    m = config.memory
    return Prices(m.cpu_price_per_core, m.memory_price_per_gb, m.cores_per_worker, m.process_base_mb)


def make_policy(config: Config) -> Policy:
    scaling = config.scaling
    next_decision_s = scaling.stabilization_s + config.loop.interval_s  # until a next decision can follow
    if per_vertex(config) and scaling.policy in ("foresail", "foresail-cpu-only"):
        return VertexPolicy(
            scaling.min_scaleout,
            scaling.max_scaleout,
            config.recovery.target_s,
            config.loop.interval_s,
            scaling.effective_necessary_window_s,
            scaling.slots_per_taskmanager,
            scaling.slot_sharing_groups,
            scaling.subtask_price,
            scaling.effective_surge_drain_s,
            scale_out_lookahead_s=next_decision_s,
            max_rescales_per_h=scaling.max_rescales_per_h,
            max_scale_in_share=scaling.max_scale_in_share,
            rescale_price_ws=scaling.rescale_price_ws,
        )
    if scaling.policy in ("foresail", "foresail-cpu-only"):
        proactive = ProactivePolicy(
            scaling.min_scaleout,
            scaling.max_scaleout,
            config.recovery.target_s,
            config.loop.interval_s,
            scaling.effective_necessary_window_s,
            scaling.effective_surge_drain_s,
            config.recovery.checkpoint_interval_s,
            config.recovery.lag_catch_up_s,
            scaling.max_rescales_per_h,
            scaling.size_scale_outs_for == "upper-bound",
            config.recovery.scale_out_at_checkpoint,
            scaling.max_scale_in_share,
            DAEDALUS_NECESSARY_WINDOW_S,
        )
        if scaling.policy == "foresail-cpu-only":
            return proactive
        m = config.memory
        settings = MemorySettings(
            hit_rate_threshold=m.hit_rate_threshold,
            latency_threshold_ns=m.latency_threshold_ms * 1e6,
            min_hit_rate_gain=m.min_hit_rate_gain,
            min_latency_gain=m.min_latency_gain,
            switch_min_saving=m.switch_min_saving,
            release_stateless=m.release_stateless,
        )
        return MemoryAwarePolicy(proactive, memory_levels(config), prices(config), settings, next_decision_s)
    if scaling.policy == "reactive":
        return ReactivePolicy(scaling.max_scaleout, scaling.drain_time_s, scaling.reactive_headroom)
    if is_baseline(scaling.policy):
        return make_baseline(config)
    raise ConfigError("scaling.policy", [f"scaling.policy: unknown policy {scaling.policy!r}"])


def make_plan(config: Config) -> GuardedPlan:
    scaling = config.scaling
    policy = make_policy(config)
    if latency_objective(config) and isinstance(policy, VertexPolicy):
        max_slots = scaling.max_scaleout * scaling.slots_per_taskmanager
        policy = VertexLatencyObjective(policy, scaling.latency_target_ms / 1000.0, max_slots)
    elif latency_objective(config):
        policy = LatencyObjective(policy, scaling.latency_target_ms / 1000.0, scaling.max_scaleout)
    # a policy with its own stabilization rules (HPA, Flink operator) must not get ours on top
    stabilization_s = 0.0 if getattr(policy, "own_stabilization", False) else scaling.stabilization_s
    return GuardedPlan(policy, scaling.min_scaleout, scaling.max_scaleout, stabilization_s)


def surge_watch_s(config: Config) -> float | None:
    """Seconds between the surge watch's reads; None without a watch: switched off, a policy without a
    surge rule (the baselines, 'reactive'), or a watch no more often than the loop."""
    watch_s = config.loop.surge_watch_s
    if (
        watch_s is None
        or not config.scaling.policy.startswith("foresail")
        or watch_s >= loop_interval_s(config)
    ):
        return None
    return watch_s


def loop_interval_s(config: Config) -> float:
    """Seconds between iterations: the HPA baselines run at the HPA's sync period, the rest at loop.interval_s."""
    if config.scaling.policy.startswith("hpa-"):
        return config.baselines.hpa_sync_period_s
    interval_s = config.baselines.ds2_decision_interval_s
    if config.scaling.policy == "ds2" and per_vertex(config) and interval_s is not None:
        return interval_s
    return config.loop.interval_s


def loop_window_s(config: Config) -> float:
    """Metrics window of an iteration: loop.window_s, else the policy's interval."""
    return config.loop.window_s if config.loop.window_s is not None else loop_interval_s(config)


def make_loop(
    config: Config,
    source: MetricsSource,
    target: ScalingTarget,
    knowledge: Knowledge,
    store: KnowledgeStore,
    log: structlog.typing.FilteringBoundLogger | None = None,
) -> MapeLoop:
    return MapeLoop(
        source,
        target,
        Analyzer(
            config.scaling.max_scaleout,
            config.capacity.saturated_backlog_s,
            config.recovery.checkpoint_interval_s,
            forecasting=not is_baseline(config.scaling.policy),
            extensions=analysis_extensions(config),
            capacity_model=config.capacity.model,
            lag_slo_s=config.recovery.lag_slo_s,
            scale_out_at_checkpoint=config.recovery.scale_out_at_checkpoint,
            loop_interval_s=loop_interval_s(config),
        ),
        make_plan(config),
        knowledge,
        store,
        loop_window_s(config),
        config.recovery.target_s,
        log,
    )


@dataclass
class TwinWorld:
    """The digital twin and the two backends the loop sees it through."""

    twin: Twin
    source: TwinMetricsSource
    target: TwinScalingTarget

    @property
    def end_s(self) -> float:
        return float(self.twin.duration_s)


def load_workload(spec: str) -> np.ndarray:
    """Per-second rates from 'builtin:sine', 'shape:NAME' (the load-shape family) or a 'second|count' file."""
    if spec == "builtin:sine":
        return builtin_sine()
    if spec.startswith("shape:"):
        try:
            return shape_rates(spec.removeprefix("shape:"))
        except KeyError as error:
            raise ConfigError("twin.workload", [f"twin.workload: {error.args[0]}"]) from None
    if not Path(spec).is_file():
        raise ConfigError(
            "twin.workload", [f"twin.workload: no such trace file {spec!r} (or use 'builtin:sine')"]
        )
    try:
        return load_trace(spec)
    except ValueError as error:
        raise ConfigError("twin.workload", [f"twin.workload: {error}"]) from error


def twin_topology(config: Config) -> Topology:
    """twin.topology, loaded and checked against the scale-outs the config may ask of it: the twin refuses
    a parallelism above a vertex's max_parallelism, so a mismatch is a config error before any run
    (refused, not clamped: a lower scaling.max_scaleout would change what every policy may choose)."""
    try:
        topology = load_topology(config.twin.topology)
    except TopologyError as error:
        raise ConfigError("twin.topology", [f"twin.topology: {error}"]) from error
    if config.twin.topology == "single":  # the twin builds it from its own knobs (TWIN_MAX_PARALLELISM)
        return topology
    vertex = min(topology.vertices, key=lambda v: v.max_parallelism)
    needed = {
        "scaling.max_scaleout": config.scaling.max_scaleout,
        "twin.reference_scaleout (the deployment workers are sized on)": config.twin.reference_scaleout,
    }
    for name, scaleout in needed.items():
        if vertex.max_parallelism < scaleout:
            raise ConfigError(
                "twin.topology",
                [
                    f"twin.topology: vertex {vertex.name!r} has max_parallelism {vertex.max_parallelism}, "
                    f"below {name} {scaleout}: lower it or raise the vertex's max_parallelism"
                ],
            )
    return topology


def make_twin(config: Config, initial_scaleout: int | None = None) -> TwinWorld:
    twin_config = config.twin
    params = TwinParams(
        headroom=twin_config.headroom,
        reference_scaleout=twin_config.reference_scaleout,
        # the twin steps whole seconds: a job checkpointing every 0.4 s replays at most a second's records
        checkpoint_interval_s=max(1, round(config.recovery.checkpoint_interval_s)),
        scale_out_at_checkpoint=config.recovery.scale_out_at_checkpoint,
        job_profile=twin_config.job_profile,
        managed_mb=config.memory.base_mb,
        process_base_mb=config.memory.process_base_mb,
        cores_per_worker=config.memory.cores_per_worker,
        cpu_request_cores=twin_config.cpu_request_cores,
        cpu_limit_cores=twin_config.cpu_limit_cores,
    )
    topology = twin_topology(config)
    try:
        twin = Twin(
            load_workload(twin_config.workload),
            params,
            seed=twin_config.seed,
            parallelism=initial_scaleout or config.twin_initial_scaleout,
            topology=None if twin_config.topology == "single" else topology,  # the twin's own key knobs
            granularity=config.scaling.granularity,
        )
    except TopologyError as error:
        raise ConfigError("twin.topology", [f"twin.topology: {error}"]) from error
    source = TwinMetricsSource(twin, scrape_interval_s=twin_config.scrape_interval_s)
    return TwinWorld(twin, source, TwinScalingTarget(twin, source))
