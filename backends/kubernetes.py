"""`ScalingTarget` on Kubernetes: the TaskManager Deployment's scale subresource or a FlinkDeployment.

A reactive-mode Flink cluster runs at as many subtasks as it has TaskManagers, so scaling it is
patching `spec.replicas` through the Deployment's `/scale` subresource (what `kubectl scale` and the HPA
use; it needs only `patch` on `deployments/scale`). With the Flink Kubernetes Operator the scale-out is a
field of the FlinkDeployment (`spec.job.parallelism`, or `spec.taskManager.replicas` for standalone
reactive mode), set with a JSON merge patch. Patches are absolute (set N, never add 1), so repeating one
after a crash or a retry cannot scale twice. Conflicts and server errors are retried with backoff.

Memory levels change the TaskManagers themselves: Flink's managed memory
(`taskmanager.memory.managed.size`) and, to keep the heap as it was, the process and container memory
(`taskmanager.memory.process.size`, the container's memory request and limit) with network memory and JVM
overhead pinned (backends/flink_memory.py). On the Deployment that is
one JSON patch of the pod template (dynamic properties `-D…` in the TaskManager container's args, and its
resources) with the replicas; on a FlinkDeployment one merge patch of `spec.taskManager.resource.memory`
and `spec.flinkConfiguration`. Every TaskManager pod restarts, which the loop counts as a rescale (give the
Deployment `strategy: Recreate`, or a rolling update restarts the job once per pod).

Per-vertex parallelism (`KubernetesVertexTarget`, Flink's adaptive scheduler): on a standalone application
cluster the Deployment's replicas carry the slots and foresail PUTs the REST requirements itself
(`DeploymentTaskManagers`); on a FlinkDeployment the operator rescales in place through the same REST path
(`OperatorRescaler`, which names the operator and Flink versions that work).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import structlog
import urllib3
from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.incluster_config import InClusterConfigLoader

from backends.bounded_http import BoundedPoolManager
from backends.flink_memory import (
    MANAGED_KEY,
    PROCESS_KEY,
    dynamic_properties,
    mebibytes,
    parse_mebibytes,
    taskmanager_memory,
)
from backends.flinkrest import BAD_ANSWER, FlinkRest
from backends.retry import with_retries
from backends.vertex_rescale import (
    RequestedRescale,
    VertexExecution,
    VertexRescaler,
    expected_parallelism,
    remembered_release,
)
from config.backends import KubernetesConfig
from config.schema import FLINK_MAX_PARALLELISM
from messages.types import CompletedRescale

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
FLINK_GROUP, FLINK_VERSION, FLINK_PLURAL = "flink.apache.org", "v1beta1", "flinkdeployments"


SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def api_client(
    settings: KubernetesConfig, service_account_dir: Path = SERVICE_ACCOUNT_DIR
) -> client.ApiClient:
    """Credentials: an explicit kubeconfig, else the pod's service account when in a cluster, else the
    default kubeconfig (~/.kube/config or $KUBECONFIG)."""
    configuration = client.Configuration()
    if settings.kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        InClusterConfigLoader(
            token_filename=str(service_account_dir / "token"),
            cert_filename=str(service_account_dir / "ca.crt"),
        ).load_and_set(client_configuration=configuration)
    else:
        kube_config.load_kube_config(
            config_file=settings.kubeconfig,
            context=settings.context,
            client_configuration=configuration,
            persist_config=False,
        )
    configuration.retries = 0  # urllib3 would retry each call 3 times unseen; `with_retries` retries, logged
    api = client.ApiClient(configuration)
    api.rest_client.pool_manager = BoundedPoolManager(api.rest_client.pool_manager)
    return api


class ScaledResource(Protocol):
    """One kind of Kubernetes object whose scale-out foresail sets."""

    description: str

    def set_scaleout(self, scaleout: int) -> None: ...

    def set_configuration(self, scaleout: int, managed_mb: float, process_mb: float) -> None: ...

    def configured_managed_mb(self) -> float | None: ...

    def desired(self) -> int | None: ...

    def ready(self, scaleout: int) -> bool: ...


class DeploymentScale:
    """The TaskManager Deployment, scaled through its scale subresource (memory: through its template)."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str,
        timeout_s: float,
        container: str = "taskmanager",
    ) -> None:
        self.apps = client.AppsV1Api(api)
        self.namespace, self.name, self.timeout_s = namespace, name, timeout_s
        self.container = container
        self.description = f"deployment {namespace}/{name}"

    def set_configuration(self, scaleout: int, managed_mb: float, process_mb: float) -> None:
        """Replicas, the TaskManager container's memory and Flink's memory options, in one JSON patch; a
        `test` of the container's name makes it fail rather than resize another container."""
        template = self._read().spec.template.spec
        names = [c.name for c in template.containers]
        if self.container not in names:
            raise ValueError(f"{self.description}: no container {self.container!r} (has {names})")
        index = names.index(self.container)
        container = template.containers[index]
        flags = dynamic_properties(managed_mb, process_mb)
        ours = tuple(f"{flag.split('=', 1)[0]}=" for flag in flags)
        args = [a for a in container.args or [] if not a.startswith(ours)]
        resources = container.resources.to_dict() if container.resources else {}
        memory = f"{round(process_mb)}Mi"
        resources = {
            "requests": {**(resources.get("requests") or {}), "memory": memory},
            "limits": {**(resources.get("limits") or {}), "memory": memory},
        }
        path = f"/spec/template/spec/containers/{index}"
        patch = [
            {"op": "test", "path": f"{path}/name", "value": self.container},
            {"op": "replace", "path": "/spec/replicas", "value": scaleout},
            {"op": "add", "path": f"{path}/args", "value": [*args, *flags]},
            {"op": "add", "path": f"{path}/resources", "value": resources},
        ]
        _applied(
            self.apps.patch_namespaced_deployment(
                self.name, self.namespace, patch, _content_type=JSON_PATCH, **_write_options(self.timeout_s)
            )
        )

    def configured_managed_mb(self) -> float | None:
        """The managed memory new TaskManager pods get (the template's flag); None: Flink's own config."""
        container = next(
            (c for c in self._read().spec.template.spec.containers if c.name == self.container), None
        )
        flag = f"-D{MANAGED_KEY}="
        values = (
            [a.removeprefix(flag) for a in (container.args or []) if a.startswith(flag)] if container else []
        )
        return parse_mebibytes(values[-1]) if values else None  # the last one wins, as in Flink

    def set_scaleout(self, scaleout: int) -> None:
        _applied(
            self.apps.patch_namespaced_deployment_scale(
                self.name,
                self.namespace,
                {"spec": {"replicas": scaleout}},
                _content_type=MERGE_PATCH,
                **_write_options(self.timeout_s),
            )
        )

    def desired(self) -> int | None:
        return _scaleout(self._read().spec.replicas)

    def ready(self, scaleout: int) -> bool:
        """Pods of the wanted spec are all ready, and no extra pod is still terminating."""
        deployment = self._read()
        status, metadata = deployment.status, deployment.metadata
        if status is None or deployment.spec.replicas != scaleout:
            return False
        if metadata.generation is not None and (status.observed_generation or 0) < metadata.generation:
            return False
        if status.updated_replicas is not None and status.updated_replicas != scaleout:
            return False  # pods of the previous template (memory) still run
        return (status.ready_replicas or 0) == scaleout and (status.replicas or scaleout) == scaleout

    def _read(self) -> client.V1Deployment:
        return self.apps.read_namespaced_deployment(
            self.name, self.namespace, _request_timeout=self.timeout_s
        )


class AbsentField(ValueError):
    """The configured parallelism path names no field of the resource: refused, not created."""


class FlinkDeploymentScale:
    """A FlinkDeployment (Flink Kubernetes Operator): the scale-out is the field at `path`.

    Only a field the resource already has is written: a misspelt path would be created, pruned by the
    operator's schema, and every rescale would wait out its timeout on a spec that never changes."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str, path: str, timeout_s: float) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.namespace, self.name, self.timeout_s = namespace, name, timeout_s
        self.path = path.split(".")
        self.description = f"flinkdeployment {namespace}/{name} ({path})"
        self.expected_managed: str | None = None
        """Managed memory of the last memory change, until the operator has reconciled it."""

    def set_configuration(self, scaleout: int, managed_mb: float, process_mb: float) -> None:
        """Scale-out, TaskManager memory and managed memory in one merge patch of the spec."""
        memory = {
            "spec": {
                "taskManager": {"resource": {"memory": mebibytes(process_mb)}},
                # the operator sets the process size from the resource above
                "flinkConfiguration": {
                    k: v for k, v in taskmanager_memory(managed_mb, process_mb).items() if k != PROCESS_KEY
                },
            }
        }
        self._check_path()
        self.merge_patch(_merged(memory, self._scaleout_patch(scaleout)))
        self.expected_managed = mebibytes(managed_mb)

    def configured_managed_mb(self) -> float | None:
        return parse_mebibytes(
            (self._read().get("spec", {}).get("flinkConfiguration") or {}).get(MANAGED_KEY)
        )

    def set_scaleout(self, scaleout: int) -> None:
        self._check_path()
        self.merge_patch(self._scaleout_patch(scaleout))

    def _check_path(self) -> None:
        document: object = self._read()
        for key in self.path:
            if not isinstance(document, dict) or key not in document:
                raise AbsentField(
                    f"{self.description}: no field {'.'.join(self.path)} (kubernetes.parallelism_path must "
                    "name the field that holds the job's parallelism, e.g. spec.job.parallelism)"
                )
            document = document[key]

    def merge_patch(self, patch: dict[str, Any]) -> None:
        _applied(
            self.custom.patch_namespaced_custom_object(
                FLINK_GROUP,
                FLINK_VERSION,
                self.namespace,
                FLINK_PLURAL,
                self.name,
                patch,
                _content_type=MERGE_PATCH,
                **_write_options(self.timeout_s),
            )
        )

    def _scaleout_patch(self, scaleout: int) -> dict[str, Any]:
        patch: Any = scaleout
        for key in reversed(self.path):
            patch = {key: patch}
        return patch

    def desired(self) -> int | None:
        return _scaleout(_walk(self._read(), self.path))

    def ready(self, scaleout: int) -> bool:
        """The operator reconciled the new spec and the job runs (its lifecycle is stable or deployed)."""
        resource = self._read()
        status = resource.get("status") or {}
        if _walk(resource, self.path) != scaleout:
            return False
        if (status.get("jobStatus") or {}).get("state") != "RUNNING":
            return False
        if status.get("lifecycleState") not in (None, "STABLE", "DEPLOYED"):
            return False
        reconciled = (status.get("reconciliationStatus") or {}).get("lastReconciledSpec")
        if reconciled:
            try:
                spec = json.loads(reconciled)
            except ValueError:
                return False
            if self.expected_managed is not None:
                managed = (spec.get("flinkConfiguration") or {}).get(MANAGED_KEY)
                if managed != self.expected_managed:
                    return False
            return _walk({"spec": spec}, self.path) == scaleout
        return True

    def _read(self) -> dict:
        return self.custom.get_namespaced_custom_object(
            FLINK_GROUP,
            FLINK_VERSION,
            self.namespace,
            FLINK_PLURAL,
            self.name,
            _request_timeout=self.timeout_s,
        )


class NotLeader(RuntimeError):
    """This replica does not hold the leader Lease: it must not act."""


class Leadership(Protocol):
    def is_leader(self) -> bool: ...


class KubernetesTarget:
    """`ScalingTarget` over a `ScaledResource`, with retries, acting only while leader."""

    def __init__(
        self,
        resource: ScaledResource,
        retries: int,
        backoff_s: float,
        leadership: Leadership | None = None,
        log: structlog.typing.FilteringBoundLogger | None = None,
        process_base_mb: float = 1890.0,
    ) -> None:
        self.resource = resource
        self.retries = retries
        self.backoff_s = backoff_s
        self.leadership = leadership
        self.log = log or structlog.get_logger("foresail.target")
        self.process_base_mb = process_base_mb
        """TaskManager process memory besides managed memory (memory.process_base_mb)."""

    def reconfigure(self, scaleout: int, managed_mb: float, now_s: float) -> None:
        """Scale-out and managed memory per slot at once; every TaskManager restarts."""
        process_mb = self.process_base_mb + managed_mb
        self._as_leader(lambda: self.resource.set_configuration(scaleout, managed_mb, process_mb))
        self.log.info(
            "kubernetes-reconfigured",
            resource=self.resource.description,
            scaleout=scaleout,
            managed_mb=managed_mb,
            process_mb=process_mb,
            time_s=now_s,
        )

    def configured_managed_mb(self) -> float | None:
        """The managed memory the resource gives TaskManagers it starts from now on (see MemoryScalingTarget)."""
        return with_retries(self.resource.configured_managed_mb, self.retries, self.backoff_s)

    def _check_leader(self) -> None:
        if self.leadership is not None and not self.leadership.is_leader():
            raise NotLeader(f"not the leader: {self.resource.description} left as it is")

    def _as_leader(self, change: Callable[[], Any]) -> Any:
        """`change()` with retries, leadership checked before every attempt: a lease lost while retrying
        (each attempt may take its request timeout) stops the next write, not only the first."""

        def attempt() -> Any:
            self._check_leader()
            return change()

        return with_retries(attempt, self.retries, self.backoff_s, self._retrying)

    def _retrying(self, attempt: int, error: BaseException, delay_s: float) -> None:
        self.log.warning(
            "kubernetes-retry",
            resource=self.resource.description,
            attempt=attempt,
            error=f"{type(error).__name__}: {getattr(error, 'status', '')} {getattr(error, 'reason', '')}".strip(),
            delay_s=round(delay_s, 3),
        )

    def scale_to(self, scaleout: int, now_s: float) -> None:
        self._as_leader(lambda: self.resource.set_scaleout(scaleout))
        self.log.info(
            "kubernetes-scaled", resource=self.resource.description, scaleout=scaleout, time_s=now_s
        )

    def desired(self) -> int | None:
        return with_retries(self.resource.desired, self.retries, self.backoff_s)

    def ready(self, scaleout: int) -> bool:
        return self.resource.ready(scaleout)


def make_resource(api: client.ApiClient, settings: KubernetesConfig) -> ScaledResource:
    if settings.resource == "deployment":
        return DeploymentScale(
            api, settings.namespace, settings.name, settings.request_timeout_s, settings.container
        )
    return FlinkDeploymentScale(
        api, settings.namespace, settings.name, settings.parallelism_path, settings.request_timeout_s
    )


def _write_options(timeout_s: float) -> dict[str, Any]:
    """A write's client options: its timeout, and the answer left unparsed (`_applied` judges its status)."""
    return {"_request_timeout": timeout_s, "_preload_content": False}


def _applied(response: Any) -> None:
    """A write whose status is 2xx was applied, whatever its body: parsed, a garbage body of a 200 raised
    after the scale had changed, and the loop decided again on a restarting job. Other statuses raise the
    client's ApiException, which the retry layer classifies."""
    status = getattr(response, "status", None)
    if not (isinstance(status, int) and 200 <= status < 300):
        raise ApiException(status=status, reason=getattr(response, "reason", None))


def _scaleout(value: object) -> int | None:
    """A scale-out read from the cluster: a whole number 0..32,768 (a float that is one counts); None for
    anything else (`true`, -4, 2.7, 1e300 were adopted as rescales found at start-up)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= FLINK_MAX_PARALLELISM:
        return None
    return value


def _merged(a: dict, b: dict) -> dict:
    """Deep merge of two patch documents (b wins on conflicting leaves)."""
    merged = dict(a)
    for key, value in b.items():
        merged[key] = (
            _merged(merged[key], value)
            if isinstance(value, dict) and isinstance(merged.get(key), dict)
            else value
        )
    return merged


def _walk(document: dict, path: list[str]) -> object:
    for key in path:
        if not isinstance(document, dict):
            return None
        document = document.get(key)
    return document


# ---- per-vertex parallelism (the adaptive scheduler; backends/vertex_rescale.py) -------------------------
OVERRIDES_KEY = "pipeline.jobvertex-parallelism-overrides"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
FREE_POD_COST = "-1000"
"""Pod deletion cost given to a TaskManager pod without tasks: its ReplicaSet removes it first."""
RELEASE_ANNOTATION = "foresail.io/release-taskmanagers"
"""On the TaskManager Deployment: the replicas a pending release of surplus TaskManagers shrinks to."""


class DeploymentTaskManagers:
    """`TaskManagerPool` of a standalone application cluster: the TaskManager Deployment's replicas.

    A scale-down lowers the replicas only by TaskManagers whose slots hold no task, after marking their
    pods with a low `pod-deletion-cost` (Kubernetes ≥ 1.22) so the ReplicaSet removes those and not a busy
    one — after a rescale Flink places tasks on any TaskManager. A TaskManager is matched to its pod by
    resource id: the pod's name (start TaskManagers with `-Dtaskmanager.resource-id=$(POD_NAME)` from the
    downward API) or, by default, Flink's `<pod IP>:<port>-<random>`."""

    def __init__(
        self, scale: DeploymentScale, rest: FlinkRest, retry: Callable[[Callable[[], Any]], Any]
    ) -> None:
        self.scale = scale
        self.core = client.CoreV1Api(scale.apps.api_client)
        self.rest = rest
        self.retry = retry

    def grow_to(self, count: int) -> int:
        before = self.retry(self.scale.desired) or 0
        if before < count:
            self.retry(lambda: self.scale.set_scaleout(count))
        return before

    def registered(self) -> int:
        """Pods of the Deployment whose TaskManager is registered: not a registration Flink keeps of one
        that died until its heartbeat times out, nor two of one pod restarted in place."""
        try:
            ids = set(self.rest.taskmanager_tasks())
            pods = self._pods()
        except (*BAD_ANSWER, ApiException, urllib3.exceptions.HTTPError):
            return 0  # not known yet: asked again at the next step
        return sum(1 for pod in pods if _taskmanager_of(pod, ids))

    def pending_release(self) -> tuple[int, str] | None:
        annotations = self.retry(self.scale._read).metadata.annotations or {}
        try:
            remembered = json.loads(annotations.get(RELEASE_ANNOTATION) or "null")
        except ValueError:
            return None
        return remembered_release(remembered)

    def remember_release(self, count: int | None, job_id: str | None) -> None:
        """An annotation on the Deployment (its metadata: no rollout); None removes it."""
        value = None if count is None else json.dumps({"count": count, "job": job_id})
        patch = {"metadata": {"annotations": {RELEASE_ANNOTATION: value}}}
        self.retry(
            lambda: _applied(
                self.scale.apps.patch_namespaced_deployment(
                    self.scale.name,
                    self.scale.namespace,
                    patch,
                    _content_type=MERGE_PATCH,
                    **_write_options(self.scale.timeout_s),
                )
            )
        )

    def shrink_to(self, count: int) -> bool:
        replicas = self.retry(self.scale.desired) or 0
        surplus = replicas - count
        if surplus <= 0:
            return True
        tasks = self.rest.taskmanager_tasks()
        free_ids = {tm for tm, count in tasks.items() if count == 0}
        busy_ids = set(tasks) - free_ids
        # a pod matched to a busy TaskManager too is not free: a container restarted in place keeps its
        # IP, and Flink lists its dead registration (0 tasks) beside the new one until the heartbeat ends
        pods = self.retry(self._pods)
        free = [p for p in pods if _taskmanager_of(p, free_ids) and not _taskmanager_of(p, busy_ids)][
            :surplus
        ]
        # a mark left by a scale-down whose replica patch failed stays on its pod, which may hold tasks
        # since: unmarked, or the ReplicaSet could pick it over the free pod marked now
        marked = {p.metadata.name for p in free}
        stale = [
            p
            for p in pods
            if p.metadata.name not in marked
            and (p.metadata.annotations or {}).get(DELETION_COST) == FREE_POD_COST
        ]
        for pod, cost in [(p, None) for p in stale] + [(p, FREE_POD_COST) for p in free]:
            self.retry(
                lambda pod=pod, cost=cost: self.core.patch_namespaced_pod(
                    pod.metadata.name,
                    self.scale.namespace,
                    {"metadata": {"annotations": {DELETION_COST: cost}}},
                    _request_timeout=self.scale.timeout_s,
                )
            )
        if free:
            self.retry(lambda: self.scale.set_scaleout(replicas - len(free)))
        return len(free) >= surplus

    def _pods(self) -> list[client.V1Pod]:
        deployment = self.scale._read()
        labels = (deployment.spec.selector.match_labels or {}) if deployment.spec.selector else {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        pods = self.core.list_namespaced_pod(
            self.scale.namespace, label_selector=selector, _request_timeout=self.scale.timeout_s
        ).items
        return [p for p in pods if p.metadata.deletion_timestamp is None]


def _taskmanager_of(pod: client.V1Pod, taskmanager_ids: set[str]) -> bool:
    """Whether the pod runs one of these TaskManagers (by pod name, else by pod IP)."""
    ip = pod.status.pod_ip if pod.status else None
    return pod.metadata.name in taskmanager_ids or (
        ip is not None and any(tm.startswith(f"{ip}:") for tm in taskmanager_ids)
    )


class OperatorRescaler:
    """A FlinkDeployment's per-vertex rescale, carried out by the Flink Kubernetes Operator in place.

    foresail writes `pipeline.jobvertex-parallelism-overrides` (every vertex) into the FlinkDeployment's
    `spec.flinkConfiguration`; the operator classifies that change as a scale (native mode only), GETs the
    job's resource requirements, sets {min(target, lower), target} on the changed vertices and PUTs the map
    — the same REST path (operator `NativeFlinkService.scale`). The rescale is followed on the REST API
    like foresail's own; its downtime counts from the patch, so it includes the operator's reconcile delay.

    Works with: operator ≥ 1.8.0 (1.6–1.7 set {target, target}, which fails the job when a slot is
    missing), `spec.mode: native`, an application deployment (`spec.job`), `flinkVersion` ≥ v1_18,
    `jobmanager.scheduler: adaptive`, `kubernetes.operator.job.upgrade.inplace-scaling.enabled: true`
    (the default). Flink 2.3 needs operator ≥ 1.15.0 (the first with `v2_3`); 2.0 ≥ 1.12, 2.1–2.2 ≥ 1.13.
    Not in standalone mode (there the operator scales only reactive mode's TaskManager replicas). On Flink
    2.x a full upgrade of the job drops the overrides (FLINK-38770): the job then restarts at its default
    parallelism and the rescale is given up after the readiness timeout (the next decision patches again).
    TaskManagers: native mode starts and releases them itself, so the count foresail plans is not applied.
    """

    def __init__(
        self,
        resource: FlinkDeploymentScale,
        rescaler: VertexRescaler,
        retry: Callable[[Callable[[], Any]], Any],
    ) -> None:
        self.resource = resource
        self.rescaler = rescaler
        self.retry = retry

    def request(self, targets: Mapping[str, int]) -> RequestedRescale | None:
        job_id, requirements, changed = self.rescaler.declared(targets)
        if not changed:
            return None
        parallelism = expected_parallelism(requirements)
        overrides = ",".join(f"{v}:{p}" for v, p in sorted(parallelism.items()))
        requested_s = self.rescaler.clock()
        self.retry(
            lambda: self.resource.merge_patch({"spec": {"flinkConfiguration": {OVERRIDES_KEY: overrides}}})
        )
        return RequestedRescale(job_id, parallelism, requested_s, tuple(changed))

    def finished(self, rescale: RequestedRescale) -> CompletedRescale | None:
        return self.rescaler.finished(rescale)


class NativeTaskManagers:
    """Native Kubernetes mode: Flink's resource manager starts TaskManager pods for the slots the job asks
    for and releases idle ones (`resourcemanager.taskmanager-timeout`); nothing to do here."""

    def grow_to(self, count: int) -> None:
        return None  # Flink starts and stops them

    def registered(self) -> int:
        return 1 << 30

    def shrink_to(self, count: int) -> bool:
        return True

    def pending_release(self) -> None:
        return None

    def remember_release(self, count: int | None, job_id: str | None) -> None:
        return None


class KubernetesVertexTarget(KubernetesTarget):
    """`VertexScalingTarget` on Kubernetes: a standalone application cluster (TaskManager Deployment +
    Flink's REST requirements) or a FlinkDeployment rescaled in place by the operator (`OperatorRescaler`).
    Acts only while leader, like the job-level target."""

    def __init__(
        self,
        resource: ScaledResource,
        rest: FlinkRest,
        retries: int,
        backoff_s: float,
        leadership: Leadership | None = None,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        super().__init__(resource, retries, backoff_s, leadership, log)
        rescaler = VertexRescaler(rest, log=self.log, may_write=self._check_leader)
        retry = self._as_leader
        if isinstance(resource, FlinkDeploymentScale):
            self.execution = VertexExecution(
                OperatorRescaler(resource, rescaler, retry), NativeTaskManagers(), self.log
            )
        elif isinstance(resource, DeploymentScale):
            self.execution = VertexExecution(
                rescaler, DeploymentTaskManagers(resource, rest, retry), self.log
            )
        else:
            raise TypeError(f"no per-vertex rescaling for {resource.description}")

    def scale_vertices(self, vertex_parallelism: Mapping[str, int], taskmanagers: int, now_s: float) -> None:
        self._check_leader()
        self.execution.scale_vertices(vertex_parallelism, taskmanagers)
        self.log.info(
            "kubernetes-vertices-requested",
            resource=self.resource.description,
            vertex_parallelism=dict(vertex_parallelism),
            taskmanagers=taskmanagers,
            time_s=now_s,
        )

    def desired(self) -> None:
        """Nothing to adopt at start-up: a per-vertex request is absolute, so deciding again is safe."""
        return None
