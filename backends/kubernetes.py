"""`ScalingTarget` on Kubernetes: the TaskManager Deployment's scale subresource or a FlinkDeployment.

A reactive-mode Flink cluster runs at as many subtasks as it has TaskManagers, so scaling it is
patching `spec.replicas` through the Deployment's `/scale` subresource (what `kubectl scale` and the HPA
use; it needs only `patch` on `deployments/scale`). With the Flink Kubernetes Operator the scale-out is a
field of the FlinkDeployment (`spec.job.parallelism`, or `spec.taskManager.replicas` for standalone
reactive mode), set with a JSON merge patch. Patches are absolute (set N, never add 1), so repeating one
after a crash or a retry cannot scale twice. Conflicts and server errors are retried with backoff.

Memory levels change the TaskManagers themselves: Flink's managed memory
(`taskmanager.memory.managed.size`) and, to keep the heap as it was, the process and container memory
(`taskmanager.memory.process.size`, the container's memory request and limit). On the Deployment that is
one JSON patch of the pod template (dynamic properties `-D…` in the TaskManager container's args, and its
resources) with the replicas; on a FlinkDeployment one merge patch of `spec.taskManager.resource.memory`
and `spec.flinkConfiguration`. Every TaskManager pod restarts, which the loop counts as a rescale (give the
Deployment `strategy: Recreate`, or a rolling update restarts the job once per pod).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

import structlog
from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.config.incluster_config import InClusterConfigLoader

from backends.retry import with_retries
from config.backends import KubernetesConfig

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
MANAGED_KEY, PROCESS_KEY = "taskmanager.memory.managed.size", "taskmanager.memory.process.size"
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
    return client.ApiClient(configuration)


class ScaledResource(Protocol):
    """One kind of Kubernetes object whose scale-out foresail sets."""

    description: str

    def set_scaleout(self, scaleout: int) -> None: ...

    def set_configuration(self, scaleout: int, managed_mb: float, process_mb: float) -> None: ...

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
        flags = (f"-D{MANAGED_KEY}={_mebibytes(managed_mb)}", f"-D{PROCESS_KEY}={_mebibytes(process_mb)}")
        args = [
            a for a in container.args or [] if not a.startswith((f"-D{MANAGED_KEY}=", f"-D{PROCESS_KEY}="))
        ]
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
        self.apps.patch_namespaced_deployment(
            self.name, self.namespace, patch, _content_type=JSON_PATCH, _request_timeout=self.timeout_s
        )

    def set_scaleout(self, scaleout: int) -> None:
        self.apps.patch_namespaced_deployment_scale(
            self.name,
            self.namespace,
            {"spec": {"replicas": scaleout}},
            _content_type=MERGE_PATCH,
            _request_timeout=self.timeout_s,
        )

    def desired(self) -> int | None:
        return self._read().spec.replicas

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


class FlinkDeploymentScale:
    """A FlinkDeployment (Flink Kubernetes Operator): the scale-out is the field at `path`."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str, path: str, timeout_s: float) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.namespace, self.name, self.timeout_s = namespace, name, timeout_s
        self.path = path.split(".")
        self.description = f"flinkdeployment {namespace}/{name} ({path})"
        self.expected_managed: str | None = None
        """Managed memory of the last memory change, until the operator has reconciled it."""

    def set_configuration(self, scaleout: int, managed_mb: float, process_mb: float) -> None:
        """Scale-out, TaskManager memory and managed memory in one merge patch of the spec."""
        patch: dict[str, Any] = scaleout
        for key in reversed(self.path):
            patch = {key: patch}
        memory = {
            "spec": {
                "taskManager": {"resource": {"memory": _mebibytes(process_mb)}},
                "flinkConfiguration": {MANAGED_KEY: _mebibytes(managed_mb)},
            }
        }
        self.custom.patch_namespaced_custom_object(
            FLINK_GROUP,
            FLINK_VERSION,
            self.namespace,
            FLINK_PLURAL,
            self.name,
            _merged(memory, patch),
            _content_type=MERGE_PATCH,
            _request_timeout=self.timeout_s,
        )
        self.expected_managed = _mebibytes(managed_mb)

    def set_scaleout(self, scaleout: int) -> None:
        patch: dict[str, Any] = scaleout
        for key in reversed(self.path):
            patch = {key: patch}
        self.custom.patch_namespaced_custom_object(
            FLINK_GROUP,
            FLINK_VERSION,
            self.namespace,
            FLINK_PLURAL,
            self.name,
            patch,
            _content_type=MERGE_PATCH,
            _request_timeout=self.timeout_s,
        )

    def desired(self) -> int | None:
        value = _walk(self._read(), self.path)
        return int(value) if isinstance(value, int | float) else None

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
        self._check_leader()
        process_mb = self.process_base_mb + managed_mb
        with_retries(
            lambda: self.resource.set_configuration(scaleout, managed_mb, process_mb),
            self.retries,
            self.backoff_s,
            self._retrying,
        )
        self.log.info(
            "kubernetes-reconfigured",
            resource=self.resource.description,
            scaleout=scaleout,
            managed_mb=managed_mb,
            process_mb=process_mb,
            time_s=now_s,
        )

    def _check_leader(self) -> None:
        if self.leadership is not None and not self.leadership.is_leader():
            raise NotLeader(f"not the leader: {self.resource.description} left as it is")

    def _retrying(self, attempt: int, error: BaseException, delay_s: float) -> None:
        self.log.warning(
            "kubernetes-retry",
            resource=self.resource.description,
            attempt=attempt,
            error=f"{type(error).__name__}: {getattr(error, 'status', '')} {getattr(error, 'reason', '')}".strip(),
            delay_s=round(delay_s, 3),
        )

    def scale_to(self, scaleout: int, now_s: float) -> None:
        self._check_leader()
        with_retries(
            lambda: self.resource.set_scaleout(scaleout), self.retries, self.backoff_s, self._retrying
        )
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


def _mebibytes(size_mb: float) -> str:
    """A memory size as Flink reads it ('632m': mebibytes)."""
    return f"{round(size_mb)}m"


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
