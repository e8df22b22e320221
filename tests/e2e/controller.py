"""A test-side stand-in for the Deployment controller and the kubelet, closing the loop from the
Kubernetes API (kmock's emulator) to real Flink: one TaskManager process per replica of the TaskManager
Deployment, and the Deployment's status reporting how many have registered with the JobManager."""

from __future__ import annotations

import threading

from kubernetes import client

from backends.flinkrest import FlinkRest
from backends.localflink import LocalFlinkCluster


class TaskManagerController:
    def __init__(
        self, api: client.ApiClient, namespace: str, name: str, cluster: LocalFlinkCluster, rest: FlinkRest
    ) -> None:
        self.apps = client.AppsV1Api(api)
        self.namespace, self.name = namespace, name
        self.cluster, self.rest = cluster, rest
        self.changes: list[tuple[int, int]] = []
        """(replicas before, replicas after) for every change the controller carried out."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tm-controller", daemon=True)

    def __enter__(self) -> TaskManagerController:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(0.5):  # a reconcile loop, as controllers resync
            try:
                self.reconcile()
            except Exception:
                continue

    def reconcile(self) -> None:
        wanted = self.apps.read_namespaced_deployment(self.name, self.namespace).spec.replicas
        running = len(self.cluster.taskmanagers())
        if wanted != running:
            self.cluster.scale_to(wanted)
            self.changes.append((running, wanted))
        registered = self.rest.taskmanager_count()
        ready = min(wanted, registered if registered is not None else 0)
        self.apps.patch_namespaced_deployment_status(
            self.name,
            self.namespace,
            {"status": {"replicas": wanted, "readyReplicas": ready, "updatedReplicas": wanted}},
            _content_type="application/merge-patch+json",
        )
