"""Baseline policies to compare foresail against, on the same loop and twin, behind the same `Policy` protocol.

- `static`: a fixed scale-out (the paper's 12 workers);
- `hpa-80`, `hpa-85`: the Kubernetes Horizontal Pod Autoscaler's algorithm on CPU;
- `flink-operator`: the Flink Kubernetes Operator autoscaler's rule (true processing rate from busy time);
- `ds2`: DS2's reactive true-rate scaling;
- at vertex granularity (scaling.granularity: vertex) `flink-operator` and `ds2` decide every vertex's
  parallelism as the operator's autoscaler and DS2's scaling manager do (vertex_operator.py,
  vertex_ds2.py);
- and the oracle floor (`oracle_workers`), which is not a policy: the twin's ground truth, per second.

Each takes its main knob from its name where given (`static-7`, `hpa-65`, `flink-operator-u0.6`,
`ds2-r1.2`: config/policy_names.py), so that a sweep of a knob is a list of policy names.
"""

from __future__ import annotations

from config.policy_names import parse_baseline
from config.schema import Config
from mape.plan import Policy
from simulator.baselines.ds2 import Ds2Policy
from simulator.baselines.flink_operator import FlinkOperatorPolicy, OperatorSettings
from simulator.baselines.hpa import HpaPolicy
from simulator.baselines.oracle import ORACLE, oracle_workers
from simulator.baselines.static import StaticPolicy
from simulator.baselines.vertex_ds2 import Ds2VertexPolicy
from simulator.baselines.vertex_operator import OperatorVertexPolicy

__all__ = [
    "BASELINE_POLICIES",
    "ORACLE",
    "Ds2Policy",
    "Ds2VertexPolicy",
    "FlinkOperatorPolicy",
    "HpaPolicy",
    "OperatorVertexPolicy",
    "StaticPolicy",
    "is_baseline",
    "make_baseline",
    "oracle_workers",
]


BASELINE_POLICIES = ("static", "hpa-80", "hpa-85", "flink-operator", "ds2")
"""The baselines at the settings the paper and each system document (any knob is accepted by name)."""


def is_baseline(name: str) -> bool:
    return parse_baseline(name) is not None


def make_baseline(config: Config) -> Policy:
    """The baseline named by `scaling.policy`, its main knob from the name or else from `baselines`."""
    b, scaling = config.baselines, config.scaling
    name = scaling.policy
    parsed = parse_baseline(name)
    if parsed is None:
        raise ValueError(f"not a baseline policy: {name!r}")
    family, knob = parsed.family, parsed.knob
    if family == "static":
        policy = StaticPolicy(b.static_scaleout if knob is None else round(knob))
    elif family == "hpa":
        request_per_load = config.twin.cpu_limit_cores / config.twin.cpu_request_cores
        policy = HpaPolicy(
            knob / 100, b.hpa_tolerance, b.hpa_scale_down_window_s, request_per_load=request_per_load
        )
    elif family == "flink-operator":
        settings = OperatorSettings(
            target_utilization=b.operator_target_utilization if knob is None else knob,
            utilization_boundary=b.operator_utilization_boundary,
            restart_time_s=b.operator_restart_time_s,
            catch_up_duration_s=b.operator_catch_up_duration_s,
            metrics_window_s=b.operator_metrics_window_s,
            stabilization_interval_s=b.operator_stabilization_interval_s,
            scale_down_interval_s=b.operator_scale_down_interval_s,
            scale_down_max_factor=b.operator_scale_down_max_factor,
            scale_up_max_factor=b.operator_scale_up_max_factor,
        )
        if scaling.granularity == "vertex":
            policy = OperatorVertexPolicy(scaling.max_scaleout, scaling.slots_per_taskmanager, settings)
        else:
            policy = FlinkOperatorPolicy(scaling.min_scaleout, scaling.max_scaleout, settings)
    elif scaling.granularity == "vertex":
        policy = Ds2VertexPolicy(
            scaling.max_scaleout,
            scaling.slots_per_taskmanager,
            b.ds2_target_ratio if knob is None else knob,
            b.ds2_activation_intervals,
            b.ds2_warmup_intervals,
            b.ds2_scaling_factor,
            b.ds2_min_change,
        )
    else:
        policy = Ds2Policy(b.ds2_target_ratio if knob is None else knob, b.ds2_min_change)
    policy.name = name  # the audit log and the comparison name the knob
    return policy
