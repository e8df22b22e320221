"""Assembling the loop from the config: policy, plan guards, analysis, and the twin backend."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import structlog

from capacity.model import CapacitySettings
from config.load import ConfigError
from config.schema import Config
from mape.analyze import Analyzer
from mape.interfaces import MetricsSource, ScalingTarget
from mape.knowledge import Knowledge, KnowledgeStore
from mape.loop import MapeLoop
from mape.plan import GuardedPlan, Policy
from mape.reactive import ReactivePolicy
from simulator.metrics import TwinMetricsSource, TwinScalingTarget
from simulator.params import TwinParams
from simulator.twin import Twin
from simulator.workload import builtin_sine, load_trace


def capacity_settings(config: Config) -> CapacitySettings:
    return CapacitySettings(**config.capacity.model_dump(exclude={"saturated_backlog_s"}))


def make_policy(config: Config) -> Policy:
    name = config.scaling.policy
    if name == "reactive":
        return ReactivePolicy(config.scaling.max_scaleout, config.scaling.drain_time_s)
    raise ConfigError("scaling.policy", [f"scaling.policy: unknown policy {name!r}"])


def make_plan(config: Config) -> GuardedPlan:
    scaling = config.scaling
    return GuardedPlan(
        make_policy(config), scaling.min_scaleout, scaling.max_scaleout, scaling.stabilization_s
    )


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
        Analyzer(config.scaling.max_scaleout, config.capacity.saturated_backlog_s),
        make_plan(config),
        knowledge,
        store,
        config.loop.effective_window_s,
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
    """Per-second rates from 'builtin:sine' or a 'second|count' trace file."""
    if spec == "builtin:sine":
        return builtin_sine()
    if not Path(spec).is_file():
        raise ConfigError(
            "twin.workload", [f"twin.workload: no such trace file {spec!r} (or use 'builtin:sine')"]
        )
    try:
        return load_trace(spec)
    except ValueError as error:
        raise ConfigError("twin.workload", [f"twin.workload: {error}"]) from error


def make_twin(config: Config, initial_scaleout: int | None = None) -> TwinWorld:
    twin_config = config.twin
    params = TwinParams(
        headroom=twin_config.headroom,
        reference_scaleout=twin_config.reference_scaleout,
        checkpoint_interval_s=round(config.recovery.checkpoint_interval_s),
    )
    twin = Twin(
        load_workload(twin_config.workload),
        params,
        seed=twin_config.seed,
        parallelism=initial_scaleout or config.twin_initial_scaleout,
    )
    source = TwinMetricsSource(twin, scrape_interval_s=twin_config.scrape_interval_s)
    return TwinWorld(twin, source, TwinScalingTarget(twin))
