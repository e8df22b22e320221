"""kmock's Kubernetes API *emulator* as a real HTTP server on 127.0.0.1, for the official client.

No real API server can run on these machines; kmock keeps objects in memory and serves the API's
create/read/patch/watch over HTTP, so the code under test speaks real HTTP with the real client. What it
does not emulate: controllers (nothing creates pods or updates status — tests do), resourceVersion
preconditions, PUT on /scale (404). It applies a write even when a test makes it answer an error.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import kmock
from kubernetes import client

TM_LABELS = {"app": "flink", "component": "taskmanager"}


class KubeEmulator:
    """kmock's emulator on its own event-loop thread; use as a context manager."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="kmock", daemon=True)
        self.url = ""

    def __enter__(self) -> KubeEmulator:
        self._thread.start()
        assert self._ready.wait(15), "kmock did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=15)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with kmock.KubernetesEmulator() as handler, kmock.Server(handler) as server:
            self.handler = handler
            handler.resources["v1/pods"] = {}  # a real API server lists none before any is made
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    # ---- clients and objects --------------------------------------------------------------------
    def api(self) -> client.ApiClient:
        configuration = client.Configuration()
        configuration.host = self.url
        return client.ApiClient(configuration)

    def kubeconfig(self, path) -> None:
        """A kubeconfig file pointing at the emulator (for code that loads credentials itself)."""
        path.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: kmock\n"
            f"clusters: [{{name: kmock, cluster: {{server: '{self.url}'}}}}]\n"
            "users: [{name: tester, user: {token: test-token}}]\n"
            "contexts: [{name: kmock, context: {cluster: kmock, user: tester, namespace: flink}}]\n"
        )

    def create_deployment(self, namespace: str, name: str, replicas: int) -> None:
        client.AppsV1Api(self.api()).create_namespaced_deployment(
            namespace,
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": TM_LABELS},
                    "template": {
                        "metadata": {"labels": TM_LABELS},
                        "spec": {"containers": [{"name": "taskmanager", "image": "flink:2.3"}]},
                    },
                },
            },
        )

    def set_deployment_status(self, namespace: str, name: str, ready: int) -> None:
        """What the Deployment controller and kubelets would report (the emulator runs none)."""
        client.AppsV1Api(self.api()).patch_namespaced_deployment_status(
            name,
            namespace,
            {"status": {"replicas": ready, "readyReplicas": ready, "updatedReplicas": ready}},
            _content_type="application/merge-patch+json",
        )

    def replicas(self, namespace: str, name: str) -> int:
        return client.AppsV1Api(self.api()).read_namespaced_deployment(name, namespace).spec.replicas

    # ---- faults -----------------------------------------------------------------------------------
    def fail(self, method: str, path_part: str, *statuses: int) -> None:
        """Answer the next requests of `method` (path containing `path_part`) with `statuses`, in order.

        kmock evaluates every reaction's filter, more than once per request: one shared plan decides the
        status of each request once, and each reaction answers only the requests given its status.
        """
        plan = list(statuses)
        decided: dict[int, int | None] = {}

        def status_of(request: kmock.Request) -> int | None:
            if request.id not in decided:
                decided[request.id] = plan.pop(0) if plan and _matches(request, method, path_part) else None
            return decided[request.id]

        for status in sorted(set(statuses)):
            self.on(lambda request, status=status: status_of(request) == status, status)

    def on(self, predicate: Callable[[kmock.Request], bool], status: int) -> None:
        """From now on, answer `status` to requests matching `predicate` (registered before returning)."""

        async def register() -> None:
            self.handler[predicate] << status

        asyncio.run_coroutine_threadsafe(register(), self._loop).result(timeout=5)

    def requests(self, method: str, path_part: str = "") -> list[kmock.Request]:
        return [r for r in list(self.handler) if _matches(r, method, path_part)]


def _matches(request: kmock.Request, method: str, path_part: str) -> bool:
    return str(request.method.value).upper() == method.upper() and path_part in str(request.url)
