"""The per-vertex Kubernetes targets against kmock (an emulator of the Kubernetes API over real HTTP: no
real API server can run here) and, for Flink's REST API, a fake JobManager (tests/backends/fake_http.py:
a real Flink cannot run beside kmock's pods, which nothing starts). The same REST path runs on real Flink
in tests/e2e/test_e2e_vertex.py."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import numpy as np
import pytest
import structlog
import structlog.testing
from kubernetes import client

from backends.execution import FollowedTarget, FollowingSource, RescaleFollower
from backends.flinkrest import FlinkRest
from backends.kubernetes import (
    DELETION_COST,
    OVERRIDES_KEY,
    RELEASE_ANNOTATION,
    DeploymentScale,
    FlinkDeploymentScale,
    KubernetesVertexTarget,
    NotLeader,
)
from backends.vertex_rescale import RescaleRequestFailed
from messages.types import Observation
from tests.backends.fake_http import FakeServer
from tests.backends.kube_emulator import TM_LABELS, KubeEmulator

NS, NAME = "flink", "flink-taskmanager"
JOB, A, B = "f" * 32, "a" * 32, "b" * 32


class FakeJobManager:
    """Flink's REST answers for one running job: its requirements, what runs, TaskManagers and tasks."""

    def __init__(self, running: dict[str, int], taskmanagers: dict[str, int]) -> None:
        self.running = dict(running)
        self.requirements = {v: [1, p] for v, p in running.items()}
        self.taskmanagers = dict(taskmanagers)
        self.running_since_ms = 0
        self.put_status: tuple[int, dict] = (200, {})
        self.failing: set[str] = set()
        """Paths answered 503 (a JobManager busy or restarting)."""
        self.server = FakeServer(self.reply)
        self.rest = FlinkRest(self.server.url, timeout_s=2)

    def puts(self) -> list[dict]:
        return [json.loads(r["body"]) for r in self.server.requests if r.get("method") == "PUT"]

    def reply(self, handler) -> tuple[int, bytes]:
        path = handler.path
        if path in self.failing:
            return 503, b"{}"
        if handler.command == "PUT":
            self.put_at_s = time.time()  # when the PUT arrived: what a restart is timed from
            status, body = self.put_status
            if status == 200:
                self.requirements = {
                    v: [b["parallelism"]["lowerBound"], b["parallelism"]["upperBound"]]
                    for v, b in json.loads(handler.body).items()
                }
            return status, json.dumps(body).encode()
        answers = {
            "/jobs/overview": {"jobs": [{"jid": JOB, "state": "RUNNING", "start-time": 1}]},
            f"/jobs/{JOB}/resource-requirements": {
                v: {"parallelism": {"lowerBound": lo, "upperBound": up}}
                for v, (lo, up) in self.requirements.items()
            },
            f"/jobs/{JOB}": {
                "state": "RUNNING",
                "timestamps": {"CREATED": self.running_since_ms - 1000},
                "vertices": [
                    {"id": v, "parallelism": p, "status": "RUNNING"} for v, p in self.running.items()
                ],
            },
            "/taskmanagers": {
                "taskmanagers": [{"id": t, "assignedTasks": n} for t, n in self.taskmanagers.items()]
            },
        }
        if path.endswith("/subtasktimes"):
            return 200, json.dumps(
                {"subtasks": [{"timestamps": {"RUNNING": self.running_since_ms}}]}
            ).encode()
        return (200, json.dumps(answers[path]).encode()) if path in answers else (404, b"{}")

    def restart_at(self, parallelism: dict[str, int], after_put_s: float) -> None:
        """What Flink shows once the job has restarted at `parallelism`, `after_put_s` after the PUT."""
        self.running = dict(parallelism)
        self.running_since_ms = int((self.put_at_s + after_put_s) * 1000)


@pytest.fixture
def kube():
    with KubeEmulator() as emulator:
        yield emulator


def _pod(kube: KubeEmulator, name: str, ip: str) -> None:
    core = client.CoreV1Api(kube.api())
    core.create_namespaced_pod(
        NS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": TM_LABELS},
             "spec": {"containers": [{"name": "taskmanager", "image": "flink:2.3"}]}},
    )  # fmt: skip
    core.patch_namespaced_pod_status(
        name, NS, {"status": {"podIP": ip}}, _content_type="application/merge-patch+json"
    )


def _deployment_target(kube: KubeEmulator, flink: FakeJobManager, leadership=None) -> KubernetesVertexTarget:
    return KubernetesVertexTarget(
        DeploymentScale(kube.api(), NS, NAME, 5.0), flink.rest, 2, 0.001, leadership
    )


def test_a_scale_up_raises_the_replicas_first_and_puts_once_the_new_taskmanager_registered(kube):
    kube.create_deployment(NS, NAME, replicas=1)
    _pod(kube, "flink-taskmanager-0", "10.0.0.1")
    # one that an OOM kill took: Flink lists it until its heartbeat times out, it has no pod any more
    flink = FakeJobManager({A: 1, B: 1}, {"10.0.0.1:6122-aaaaaa": 2, "10.0.0.9:6122-dead00": 0})
    target = _deployment_target(kube, flink)
    target.scale_vertices({A: 1, B: 2}, 2, now_s=0.0)
    assert kube.replicas(NS, NAME) == 2 and flink.puts() == []  # the TaskManager is not up yet
    _pod(kube, "flink-taskmanager-1", "10.0.0.2")  # what the ReplicaSet controller would do
    assert target.execution.advance() is None and flink.puts() == []  # the dead registration not counted
    flink.taskmanagers["flink-taskmanager-1"] = 0  # registered (resource id = pod name)
    assert target.execution.advance() is None
    assert flink.puts() == [
        {
            A: {"parallelism": {"lowerBound": 1, "upperBound": 1}},
            B: {"parallelism": {"lowerBound": 1, "upperBound": 2}},
        }
    ]
    flink.restart_at({A: 1, B: 2}, after_put_s=3.0)
    completed = target.execution.advance()
    assert completed.granularity == "vertex" and completed.vertex_parallelism == {A: 1, B: 2}
    assert completed.downtime_s == pytest.approx(3.0, abs=0.5)
    assert [p.data for p in kube.requests("PATCH", "/scale")] == [{"spec": {"replicas": 2}}]
    flink.server.close()


def _two_pods(kube: KubeEmulator, names: tuple[str, str], running: dict[str, int], tasks: tuple[int, int]):
    """Two TaskManager pods (10.0.0.1, 10.0.0.2) with Flink's default resource ids, holding `tasks`."""
    kube.create_deployment(NS, NAME, replicas=2)
    _pod(kube, names[0], "10.0.0.1")
    _pod(kube, names[1], "10.0.0.2")
    flink = FakeJobManager(running, {"10.0.0.1:6122-aaaaaa": tasks[0], "10.0.0.2:6122-bbbbbb": tasks[1]})
    return flink, _deployment_target(kube, flink)


def test_a_scale_down_removes_only_the_pod_whose_taskmanager_holds_no_task(kube):
    flink, target = _two_pods(kube, ("tm-busy", "tm-free"), {A: 1, B: 2}, (4, 1))
    target.scale_vertices({A: 1, B: 1}, 1, now_s=0.0)
    assert len(flink.puts()) == 1 and kube.replicas(NS, NAME) == 2  # PUT at once; no pod removed yet
    assert target.execution.advance() is None and kube.replicas(NS, NAME) == 2
    flink.restart_at({A: 1, B: 1}, after_put_s=2.0)
    flink.taskmanagers["10.0.0.2:6122-bbbbbb"] = 0  # after the restart Flink left it without tasks
    assert target.execution.advance() is not None
    core = client.CoreV1Api(kube.api())
    costs = {
        p: (core.read_namespaced_pod(p, NS).metadata.annotations or {}).get(DELETION_COST)
        for p in ("tm-busy", "tm-free")
    }
    assert costs == {"tm-busy": None, "tm-free": "-1000"}
    assert kube.replicas(NS, NAME) == 1 and target.execution.keep_taskmanagers is None
    flink.server.close()


def test_a_daemon_restarted_before_the_surplus_was_free_still_releases_it(kube):
    """The count to release to is an annotation on the Deployment (no rollout), not only in memory."""
    flink, target = _two_pods(kube, ("tm-0", "tm-1"), {A: 1, B: 2}, (2, 1))
    target.scale_vertices({A: 1, B: 1}, 1, now_s=0.0)
    flink.restart_at({A: 1, B: 1}, after_put_s=2.0)
    assert target.execution.advance() is not None and kube.replicas(NS, NAME) == 2  # both hold tasks
    apps = client.AppsV1Api(kube.api())
    annotations = apps.read_namespaced_deployment(NAME, NS).metadata.annotations
    assert json.loads(annotations[RELEASE_ANNOTATION]) == {"count": 1, "job": JOB}
    flink.taskmanagers["10.0.0.2:6122-bbbbbb"] = 0
    restarted = _deployment_target(kube, flink)  # a new daemon: a new execution object
    restarted.execution.advance()
    assert kube.replicas(NS, NAME) == 1
    assert RELEASE_ANNOTATION not in (apps.read_namespaced_deployment(NAME, NS).metadata.annotations or {})
    flink.server.close()


def test_a_free_mark_left_by_a_failed_scale_down_is_cleared_once_its_pod_holds_tasks(kube):
    """The mark stays on its pod when the replica patch after it fails (the lease lost in between); once
    that pod holds tasks again, the next scale-down must not leave it tied with the pod it frees."""
    from backends.kubernetes import DeploymentTaskManagers
    from backends.retry import with_retries

    kube.create_deployment(NS, NAME, replicas=2)
    _pod(kube, "tm-a", "10.0.0.1")
    _pod(kube, "tm-b", "10.0.0.2")
    flink = FakeJobManager({A: 1}, {"10.0.0.1:6122-aaaaaa": 0, "10.0.0.2:6122-bbbbbb": 2})
    pool = DeploymentTaskManagers(
        DeploymentScale(kube.api(), NS, NAME, 5.0), flink.rest, lambda call: with_retries(call, 0, 0.0)
    )
    patch = pool.scale.set_scaleout

    def lease_lapsed(count: int) -> None:  # between marking the free pod and lowering the replicas
        raise NotLeader("the lease lapsed")

    pool.scale.set_scaleout = lease_lapsed
    with pytest.raises(NotLeader):
        pool.shrink_to(1)
    pool.scale.set_scaleout = patch
    patch(3)
    _pod(kube, "tm-c", "10.0.0.3")
    flink.taskmanagers = {"10.0.0.1:6122-aaaaaa": 2, "10.0.0.2:6122-bbbbbb": 2, "10.0.0.3:6122-cccccc": 0}
    assert pool.shrink_to(2) and kube.replicas(NS, NAME) == 2
    core = client.CoreV1Api(kube.api())
    costs = {
        p: (core.read_namespaced_pod(p, NS).metadata.annotations or {}).get(DELETION_COST)
        for p in ("tm-a", "tm-b", "tm-c")
    }
    assert costs == {"tm-a": None, "tm-b": None, "tm-c": "-1000"}
    flink.server.close()


def test_a_replica_is_kept_while_its_taskmanager_still_holds_tasks(kube):
    flink, target = _two_pods(kube, ("tm-0", "tm-1"), {A: 1, B: 1}, (3, 1))
    target.execution.keep_taskmanagers = 1  # a finished scale-down whose surplus is not free yet
    target.execution.advance()
    core = client.CoreV1Api(kube.api())
    assert kube.replicas(NS, NAME) == 2
    assert all(not core.read_namespaced_pod(p, NS).metadata.annotations for p in ("tm-0", "tm-1"))
    flink.server.close()


def test_a_standby_replica_leaves_the_cluster_alone(kube):
    kube.create_deployment(NS, NAME, replicas=1)
    flink = FakeJobManager({A: 1}, {})

    class Standby:
        def is_leader(self) -> bool:
            return False

    standby = _deployment_target(kube, flink, Standby())
    with pytest.raises(NotLeader):
        standby.scale_vertices({A: 2}, 2, now_s=0.0)
    assert kube.replicas(NS, NAME) == 1 and flink.puts() == []
    # the leader's pending release is the leader's: a standby neither takes it up nor says so every loop
    client.AppsV1Api(kube.api()).patch_namespaced_deployment(
        NAME, NS, {"metadata": {"annotations": {RELEASE_ANNOTATION: json.dumps({"count": 1, "job": JOB})}}}
    )
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            standby.execution.advance()
    assert standby.execution.keep_taskmanagers is None
    said = [e for e in logs if e["event"] == "taskmanagers-release-unknown" and e["log_level"] == "warning"]
    assert len(said) == 1 and "not the leader" in said[0]["error"]
    flink.server.close()


def test_a_leader_that_loses_the_lease_while_a_taskmanager_starts_does_not_put_later(kube):
    """A scale-up's PUT goes out loops after the decision, once the TaskManager registers: leadership is
    asked again then, not only when the replicas were raised."""
    kube.create_deployment(NS, NAME, replicas=1)
    _pod(kube, "flink-taskmanager-0", "10.0.0.1")
    flink = FakeJobManager({A: 1}, {"10.0.0.1:6122-aaaaaa": 1})

    class Lease:
        held = True

        def is_leader(self) -> bool:
            return self.held

    lease = Lease()
    target = _deployment_target(kube, flink, lease)
    target.scale_vertices({A: 2}, 2, now_s=0.0)
    assert kube.replicas(NS, NAME) == 2 and flink.puts() == []
    lease.held = False
    _pod(kube, "flink-taskmanager-1", "10.0.0.2")
    flink.taskmanagers["flink-taskmanager-1"] = 0
    with pytest.raises(NotLeader):
        target.execution.advance()
    assert flink.puts() == [] and target.execution.idle()
    flink.server.close()


def _flinkdeployment(kube: KubeEmulator) -> tuple[FlinkDeploymentScale, Callable[[], dict]]:
    """A FlinkDeployment `chain` on the adaptive scheduler, and a reader of its flinkConfiguration."""
    custom = client.CustomObjectsApi(kube.api())
    custom.create_namespaced_custom_object(
        "flink.apache.org", "v1beta1", NS, "flinkdeployments",
        {"apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment",
         "metadata": {"name": "chain", "namespace": NS},
         "spec": {"flinkVersion": "v2_3", "flinkConfiguration": {"jobmanager.scheduler": "adaptive"},
                  "job": {"jarURI": "local:///job.jar", "parallelism": 1}}},
    )  # fmt: skip
    resource = FlinkDeploymentScale(kube.api(), NS, "chain", "spec.job.parallelism", 5.0)
    return resource, lambda: custom.get_namespaced_custom_object(
        "flink.apache.org", "v1beta1", NS, "flinkdeployments", "chain"
    )["spec"]["flinkConfiguration"]


def test_a_flinkdeployment_gets_the_overrides_for_the_operator_to_rescale_in_place(kube):
    resource, configuration = _flinkdeployment(kube)
    flink = FakeJobManager({A: 1, B: 1}, {})
    target = KubernetesVertexTarget(resource, flink.rest, 2, 0.001)
    flink.put_at_s = time.time()  # the operator PUTs as the patch lands: no PUT reaches this fake
    target.scale_vertices({A: 1, B: 3}, 3, now_s=0.0)
    assert configuration() == {
        "jobmanager.scheduler": "adaptive",
        OVERRIDES_KEY: f"{A}:1,{B}:3",
    }
    assert flink.puts() == []  # the operator PUTs the requirements, not foresail
    assert target.execution.advance() is None
    flink.restart_at({A: 1, B: 3}, after_put_s=4.0)  # the operator's in-place rescale has landed
    assert target.execution.advance().downtime_s == pytest.approx(4.0, abs=0.5)
    flink.server.close()


def test_a_failing_patch_of_the_flinkdeployment_is_retried_like_the_job_level_one(kube):
    resource, configuration = _flinkdeployment(kube)
    flink = FakeJobManager({A: 1, B: 1}, {})
    kube.fail("PATCH", "/flinkdeployments/chain", 503)
    KubernetesVertexTarget(resource, flink.rest, 2, 0.001).scale_vertices({A: 1, B: 3}, 3, now_s=0.0)
    assert configuration()[OVERRIDES_KEY] == f"{A}:1,{B}:3"
    flink.server.close()


def test_a_pod_whose_taskmanager_holds_tasks_is_never_taken_for_free():
    """A TaskManager container restarted inside its pod keeps the pod's IP, and Flink lists its dead
    registration (0 tasks, until the heartbeat times out) beside the new one: matched by IP, the busy pod
    was marked free and the Deployment scaled in under a running task."""
    with KubeEmulator() as kube:
        kube.create_deployment(NS, NAME, replicas=2)
        _pod(kube, "tm-0", "10.0.0.1")
        _pod(kube, "tm-1", "10.0.0.2")
        registrations = {"10.0.0.1:6122-dead01": 0, "10.0.0.1:6122-new002": 2, "10.0.0.2:6122-bbbbbb": 2}
        flink = FakeJobManager({"a" * 32: 2}, registrations)
        target = _deployment_target(kube, flink)
        target.execution.keep_taskmanagers = 1  # a finished scale-down whose surplus is not free yet
        target.execution.advance()
        core = client.CoreV1Api(kube.api())
        costs = [
            (core.read_namespaced_pod(p, NS).metadata.annotations or {}).get(DELETION_COST)
            for p in ("tm-0", "tm-1")
        ]
        assert kube.replicas(NS, NAME) == 2 and costs == [None, None]
        flink.server.close()


def test_a_scale_down_flink_refused_stops_no_taskmanager_later():
    """The count to keep was set before the PUT and never cleared when Flink refused it (503): at the
    job's next failover, when every TaskManager shows no task for a moment, one the job needed was stopped."""
    a, b = "a" * 32, "b" * 32
    with KubeEmulator() as kube:
        kube.create_deployment(NS, NAME, replicas=2)
        _pod(kube, "tm-0", "10.0.0.1")
        _pod(kube, "tm-1", "10.0.0.2")
        flink = FakeJobManager({a: 2, b: 2}, {"10.0.0.1:6122-aaaaaa": 2, "10.0.0.2:6122-bbbbbb": 2})
        target = _deployment_target(kube, flink)
        flink.put_status = (503, {"errors": ["Service temporarily unavailable"]})
        with pytest.raises(RescaleRequestFailed):
            target.scale_vertices({a: 1, b: 1}, 1, now_s=0.0)
        flink.taskmanagers = {"10.0.0.1:6122-aaaaaa": 0, "10.0.0.2:6122-bbbbbb": 0}  # a failover
        target.execution.advance()
        assert kube.replicas(NS, NAME) == 2
        flink.server.close()


class _Observed:
    def observe(self, now_s: float, window_s: float) -> Observation:
        return Observation(now_s, window_s, np.array([now_s]), np.array([100.0]), (), 0.0, 1, 600.0)


def test_paused_foresail_sends_no_deferred_put_and_stops_no_taskmanager():
    """Paused (or blocked by another autoscaler), the loop only recommends, but a per-vertex rescale begun
    before was driven on from the observations: its PUT went out when the TaskManager registered, and a
    scale-down's surplus was stopped, undoing an operator's own scale to 3."""
    a, b = "a" * 32, "b" * 32
    with KubeEmulator() as kube:
        kube.create_deployment(NS, NAME, replicas=1)
        _pod(kube, "tm-0", "10.0.0.1")
        flink = FakeJobManager({a: 1, b: 1}, {"10.0.0.1:6122-aaaaaa": 2})
        raw = _deployment_target(kube, flink)
        follower = RescaleFollower(raw, timeout_s=600.0)
        source, target = FollowingSource(_Observed(), follower), FollowedTarget(raw, follower)
        target.scale_vertices({a: 1, b: 2}, 2, now_s=0.0)  # a scale-up: its PUT waits for the TaskManager
        target.recommend_only = True  # paused
        flink.taskmanagers["flink-taskmanager-1"] = 0  # the new TaskManager registers
        source.observe(60.0, 60.0)
        assert flink.puts() == [] and follower.pending is None and raw.execution.idle()
        raw.execution.keep_taskmanagers = 1  # as a finished scale-down with its surplus still busy leaves
        apps = client.AppsV1Api(kube.api())  # the operator scales by hand while foresail is paused
        apps.patch_namespaced_deployment_scale(NAME, NS, {"spec": {"replicas": 3}})
        _pod(kube, "tm-2", "10.0.0.3")
        flink.taskmanagers["10.0.0.3:6122-cccccc"] = 0  # an empty TaskManager joins
        source.observe(120.0, 60.0)
        assert kube.replicas(NS, NAME) == 3
        target.recommend_only = False  # acting again: the surplus is released as before
        source.observe(180.0, 60.0)
        assert kube.replicas(NS, NAME) < 3
        flink.server.close()


def test_a_registration_that_cannot_be_read_is_waited_for_not_a_failed_rescale(kube):
    """One blip of the JobManager's REST API while a scale-up started dropped the rescale and stopped the
    TaskManagers it had just asked for."""
    kube.create_deployment(NS, NAME, replicas=1)
    _pod(kube, "flink-taskmanager-0", "10.0.0.1")
    flink = FakeJobManager({A: 1}, {"10.0.0.1:6122-aaaaaa": 1})
    target = _deployment_target(kube, flink)
    flink.failing.add("/taskmanagers")
    target.scale_vertices({A: 2}, 2, now_s=0.0)
    assert target.execution.waiting is not None and kube.replicas(NS, NAME) == 2
    flink.server.close()
