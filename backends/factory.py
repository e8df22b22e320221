"""Building the real backends from the config, and checking that they answer (`check-config`)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import requests
import structlog

from backends.execution import FollowedTarget, FollowingSource, RescaleFollower
from backends.flinkrest import FlinkRest
from backends.localflink import LocalFlinkCluster, LocalFlinkTarget, LocalFlinkVertexTarget
from backends.prometheus import PrometheusClient, PrometheusMetricsSource, probe_queries
from config.load import ConfigError
from config.schema import Config

if TYPE_CHECKING:
    from backends.lease import LeaseElector
    from backends.oversight import Oversight


@dataclass
class RealBackends:
    source: FollowingSource
    target: FollowedTarget
    follower: RescaleFollower
    elector: LeaseElector | None = None
    """Set when leader election is on (Kubernetes only)."""
    oversight: Oversight | None = None
    """Kubernetes only: pause annotation, conflicting autoscalers, Events on the scaled object."""

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def start(self) -> None:
        if self.elector is not None:
            self.elector.start()

    def close(self) -> None:
        if self.elector is not None:
            self.elector.stop(release=True)


def make_real_backends(
    config: Config, on_rescale_outcome: Callable[[str, float], None] | None = None
) -> RealBackends:
    """Prometheus source + the configured target, wrapped with readiness following and recommend-only."""
    log = structlog.get_logger("foresail.backends")
    elector = oversight = None
    if config.target.kind == "prometheus+kubernetes":
        from backends.kubernetes import KubernetesTarget, KubernetesVertexTarget, api_client, make_resource
        from backends.lease import LeaseElector, default_identity
        from backends.oversight import Oversight

        k8s = config.kubernetes
        api = api_client(k8s)
        oversight = Oversight(api, k8s)
        if k8s.leader_election:
            elector = LeaseElector(
                api,
                k8s.namespace,
                k8s.lease_name,
                k8s.identity or default_identity(),
                k8s.lease_duration_s,
                k8s.renew_period_s,
                request_timeout_s=k8s.request_timeout_s,
            )
        if granularity(config) == "vertex":
            raw = KubernetesVertexTarget(
                make_resource(api, k8s), vertex_rest(config), k8s.retries, k8s.retry_backoff_s, elector
            )
        else:
            raw = KubernetesTarget(
                make_resource(api, k8s),
                k8s.retries,
                k8s.retry_backoff_s,
                elector,
                process_base_mb=config.memory.process_base_mb,
            )
        timeout_s = k8s.readiness_timeout_s
    elif config.target.kind == "prometheus+local-flink":
        local = LocalFlinkVertexTarget if granularity(config) == "vertex" else LocalFlinkTarget
        raw = local(
            local_cluster(config),
            FlinkRest(config.local_flink.rest_url),
            process_base_mb=config.memory.process_base_mb,
        )
        timeout_s = config.local_flink.readiness_timeout_s
    else:
        raise ConfigError("target.kind", [f"target.kind: {config.target.kind!r} has no real backends"])
    follower = RescaleFollower(raw, timeout_s, log, on_rescale_outcome)
    return RealBackends(
        source=FollowingSource(
            PrometheusMetricsSource(config.prometheus, rest=job_graph_rest(config)), follower
        ),
        target=FollowedTarget(raw, follower, config.target.recommend_only),
        follower=follower,
        elector=elector,
        oversight=oversight,
    )


def job_graph_rest(config: Config) -> FlinkRest | None:
    """Flink's REST API the Monitor reads the job graph from (see `prometheus.flink_rest_url`)."""
    url = config.prometheus.flink_rest_url
    if url is None:
        local = config.target.kind == "prometheus+local-flink"
        url = config.local_flink.rest_url if local else "http://127.0.0.1:8081"
    return FlinkRest(url, timeout_s=config.prometheus.timeout_s) if url else None


def local_cluster(config: Config) -> LocalFlinkCluster:
    settings = config.local_flink
    home = settings.flink_home or os.environ.get("FLINK_HOME")
    if not home:
        raise ConfigError(
            "local_flink.flink_home", ["local_flink.flink_home: not set and FLINK_HOME is empty"]
        )
    conf = Path(settings.conf_dir or os.environ.get("FLINK_CONF_DIR") or Path(home) / "conf")
    state = Path(settings.state_dir) if settings.state_dir else conf / "foresail-taskmanagers"
    try:
        return LocalFlinkCluster(Path(home), conf, state)
    except (FileNotFoundError, OSError) as error:
        raise ConfigError("local_flink", [f"local_flink: {error}"]) from error


def granularity(config: Config) -> str:
    """`scaling.granularity` ('job' or 'vertex'); 'job' where the config has no such setting yet."""
    return getattr(config.scaling, "granularity", "job")


def vertex_rest(config: Config) -> FlinkRest:
    """The JobManager REST API the per-vertex path rescales through (the one the job graph is read from)."""
    return job_graph_rest(config) or FlinkRest(
        config.local_flink.rest_url, timeout_s=config.prometheus.timeout_s
    )


def scheduler_problem(rest: FlinkRest) -> str | None:
    """Why the cluster cannot take per-vertex parallelism (None: it runs the adaptive scheduler)."""
    try:
        scheduler = rest.scheduler()
    except (requests.RequestException, KeyError, TypeError, ValueError) as error:
        return f"cannot read the JobManager's configuration ({type(error).__name__})"
    if scheduler == "adaptive":
        return None
    fix = "set jobmanager.scheduler: adaptive (no scheduler-mode: reactive), or scaling.granularity: job"
    if scheduler == "reactive":
        return (
            "configuration error: scaling.granularity is vertex but the cluster runs reactive mode, which "
            f"refuses per-vertex parallelism (HTTP 500 on PUT /jobs/:jobid/resource-requirements); {fix}"
        )
    return (
        f"configuration error: scaling.granularity is vertex but the cluster runs the {scheduler} "
        f"scheduler, which has no per-vertex rescaling; {fix}"
    )


def restart_note(config: Config) -> str | None:
    """Whether `recovery.scale_out_at_checkpoint` suits the cluster's Flink: from 2.0 on (FLIP-461) a
    scale-out restarts from a checkpoint that just completed; before, it rolled back to the last periodic
    one. On Flink 1.x the setting must be off (the plan would predict no replay where there is one); on
    2.x off is what measured better (the replay it assumes is a margin for the restart's spread: README,
    *Flink 2.x scale-outs*). None when it is off, at vertex granularity (the per-vertex path restarts from a
    checkpoint on Flink 2.x whatever the setting) or without a Flink REST API; one line when the version is
    unreadable."""
    if granularity(config) == "vertex" or not config.recovery.scale_out_at_checkpoint:
        return None  # off suits every version (on Flink 2.x the replay it assumes is a margin)
    if config.target.kind != "prometheus+local-flink" and config.prometheus.flink_rest_url is None:
        return None
    rest = job_graph_rest(config)
    if rest is None:
        return None
    try:
        version = rest.flink_version()
        at_checkpoint = int(version.split(".")[0]) >= 2
    except (requests.RequestException, KeyError, TypeError, ValueError) as error:
        return f"cannot read the Flink version at {rest.url} ({type(error).__name__}) to check recovery.scale_out_at_checkpoint"
    if at_checkpoint:
        return (
            f"Flink {version} restarts a scale-out from a checkpoint that just completed (FLIP-461), as "
            "recovery.scale_out_at_checkpoint: true says, but the plan then keeps no margin for the "
            "restart's spread: measured on the twin's Flink 2.x restarts, false (the default) spent a third "
            "to three quarters of the seconds over the SLO (35-73%) at the same workers"
        )
    return (
        f"Flink {version} rolls a scale-out back to the last periodic checkpoint: set "
        "recovery.scale_out_at_checkpoint: false, or the plan predicts no replay where there is one"
    )


def check_connections(
    config: Config, granularity_override: str | None = None
) -> list[tuple[str, str | None, bool]]:
    """(what, problem or None, whether the daemon needs it) for Prometheus, each configured query and the
    target: does each answer as configured? At vertex granularity also whether the cluster's scheduler
    takes per-vertex parallelism."""
    checks: list[tuple[str, str | None, bool]] = []
    client = PrometheusClient(config.prometheus)
    try:
        client.ping()
    except Exception as error:
        checks.append((f"prometheus {config.prometheus.url}", f"{type(error).__name__}: {error}", True))
    else:
        checks.append((f"prometheus {config.prometheus.url}", None, True))
        now_s = time.time()
        for name, required, why in probe_queries(
            client, config.prometheus, config.loop.effective_window_s, now_s
        ):
            checks.append((f"prometheus.{name}", why, required))
    if config.target.kind == "prometheus+kubernetes":
        from backends.kubernetes import api_client, make_resource

        what = f"{config.kubernetes.resource} {config.kubernetes.namespace}/{config.kubernetes.name}"
        try:
            desired = make_resource(api_client(config.kubernetes), config.kubernetes).desired()
            if desired is None and config.kubernetes.resource == "flinkdeployment":
                why = f"{config.kubernetes.parallelism_path} holds no parallelism (absent or not a whole number)"
                checks.append((what, why, True))
            else:
                checks.append((f"{what} (scale-out {desired})", None, True))
        except Exception as error:
            first_line = str(error).splitlines()[0] if str(error) else ""
            checks.append((what, f"{type(error).__name__}: {first_line}", True))
    elif config.target.kind == "prometheus+local-flink":
        what = f"local flink {config.local_flink.rest_url}"
        try:
            local_cluster(config)
            status = FlinkRest(config.local_flink.rest_url).job_status()
            checks.append(
                (what, None if status is not None else "no running job answers on the REST API", True)
            )
        except ConfigError as error:
            checks.append((what, "; ".join(error.problems), True))
    if (granularity_override or granularity(config)) == "vertex":
        rest = vertex_rest(config)
        checks.append((f"per-vertex rescaling through {rest.url}", scheduler_problem(rest), True))
    return checks
