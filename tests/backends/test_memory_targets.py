"""Memory levels executed on the real targets: the TaskManager Deployment and a FlinkDeployment against
kmock, a Kubernetes API *emulator* served over real HTTP (see kube_emulator.py for what it does not
emulate), the rescale follower, and the local cluster restarting its TaskManagers with new memory."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import requests
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backends.execution import FollowedTarget, FollowingSource, NotApplied, RescaleFollower
from backends.flink_memory import parse_mebibytes
from backends.kubernetes import DeploymentScale, FlinkDeploymentScale, KubernetesTarget
from backends.localflink import LocalFlinkCluster, LocalFlinkTarget
from mape.knowledge import KnowledgeSettings
from mape.knowledge_store import KnowledgeStore
from mape.loop import MapeLoop
from messages.types import Assessment, Decision, FailedMemoryChange, Observation
from tests.backends.kube_emulator import TM_LABELS, KubeEmulator
from tests.e2e.stack import wait_for

NS, NAME = "flink", "flink-taskmanager"
MANAGED = "-Dtaskmanager.memory.managed.size="


@pytest.fixture
def kube():
    with KubeEmulator() as emulator:
        client.AppsV1Api(emulator.api()).create_namespaced_deployment(
            NS,
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": NAME, "namespace": NS},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": TM_LABELS},
                    "template": {
                        "metadata": {"labels": TM_LABELS},
                        "spec": {
                            "containers": [
                                {"name": "taskmanager", "image": "flink:2.3", "args": ["taskmanager"]}
                            ]
                        },
                    },
                },
            },
        )  # as in deploy/flink-reactive.yaml
        yield emulator


def _patches(kube: KubeEmulator) -> list:
    return kube.requests("PATCH")


def _container(kube: KubeEmulator) -> client.V1Container:
    deployment = client.AppsV1Api(kube.api()).read_namespaced_deployment(NAME, NS)
    return deployment.spec.template.spec.containers[0]


def test_new_memory_patches_replicas_container_memory_and_flink_options_at_once(kube):
    target = KubernetesTarget(DeploymentScale(kube.api(), NS, NAME, 5.0), 2, 0.001, process_base_mb=1890.0)
    target.reconfigure(3, 632.0, now_s=0.0)
    patches = _patches(kube)
    assert len(patches) == 1 and str(patches[0].url.path).endswith(f"/deployments/{NAME}")  # not /scale
    assert kube.replicas(NS, NAME) == 3
    container = _container(kube)
    pins = [f"-Dtaskmanager.memory.{k}=144m" for k in ("network.min", "network.max")] + [
        f"-Dtaskmanager.memory.{k}=192m" for k in ("jvm-overhead.min", "jvm-overhead.max")
    ]  # what Flink derives for the 1,890 MB process without managed memory: the heap stays
    assert container.args == [
        "taskmanager",
        f"{MANAGED}632m",
        "-Dtaskmanager.memory.process.size=2522m",
        *pins,
    ]
    assert container.resources.requests["memory"] == container.resources.limits["memory"] == "2522Mi"
    target.reconfigure(3, 0.0, now_s=60.0)  # a stateless job: no managed memory; old flags replaced
    assert _container(kube).args == [
        "taskmanager",
        f"{MANAGED}0m",
        "-Dtaskmanager.memory.process.size=1890m",
        *pins,
    ]


def test_other_resources_of_the_container_are_kept(kube):
    apps = client.AppsV1Api(kube.api())
    resources = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}}
    apps.patch_namespaced_deployment(
        NAME, NS, [{"op": "add", "path": "/spec/template/spec/containers/0/resources", "value": resources}],
        _content_type="application/json-patch+json",
    )  # fmt: skip
    assert _container(kube).resources.limits == {"cpu": "1", "memory": "2Gi"}
    KubernetesTarget(DeploymentScale(kube.api(), NS, NAME, 5.0), 2, 0.001).reconfigure(2, 316.0, 0.0)
    assert _container(kube).resources.limits == {"cpu": "1", "memory": "2206Mi"}


def test_a_deployment_without_the_taskmanager_container_is_refused(kube):
    resource = DeploymentScale(kube.api(), NS, NAME, 5.0, container="flink-tm")
    with pytest.raises(ValueError, match="no container 'flink-tm'"):
        KubernetesTarget(resource, 2, 0.001).reconfigure(3, 316.0, 0.0)
    assert _patches(kube) == []


def test_a_memory_patch_is_retried_on_conflict(kube):
    kube.fail("PATCH", f"/deployments/{NAME}", 409)
    KubernetesTarget(DeploymentScale(kube.api(), NS, NAME, 5.0), 3, 0.001).reconfigure(4, 316.0, 0.0)
    assert len(_patches(kube)) == 2 and kube.replicas(NS, NAME) == 4


def test_readiness_waits_for_every_pod_of_the_new_template(kube):
    resource = DeploymentScale(kube.api(), NS, NAME, 5.0)
    KubernetesTarget(resource, 2, 0.001).reconfigure(2, 316.0, 0.0)
    apps = client.AppsV1Api(kube.api())
    status = {"replicas": 2, "readyReplicas": 2, "updatedReplicas": 1}
    apps.patch_namespaced_deployment_status(
        NAME, NS, {"status": status}, _content_type="application/merge-patch+json"
    )
    assert not resource.ready(2)  # one pod still runs the old memory
    kube.set_deployment_status(NS, NAME, ready=2)
    assert resource.ready(2)


def test_a_flinkdeployment_gets_taskmanager_memory_and_managed_memory_in_one_merge_patch(kube):
    custom = client.CustomObjectsApi(kube.api())
    spec = {
        "flinkVersion": "v2_0",
        "flinkConfiguration": {"taskmanager.numberOfTaskSlots": "1"},
        "taskManager": {"replicas": 2, "resource": {"cpu": 1, "memory": "2048m"}},
    }
    custom.create_namespaced_custom_object(
        "flink.apache.org", "v1beta1", NS, "flinkdeployments",
        {"apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment",
         "metadata": {"name": "wordcount", "namespace": NS}, "spec": spec},
    )  # fmt: skip
    resource = FlinkDeploymentScale(kube.api(), NS, "wordcount", "spec.taskManager.replicas", 5.0)
    KubernetesTarget(resource, 2, 0.001, process_base_mb=1890.0).reconfigure(4, 632.0, 0.0)
    stored = custom.get_namespaced_custom_object(
        "flink.apache.org", "v1beta1", NS, "flinkdeployments", "wordcount"
    )
    assert stored["spec"]["taskManager"] == {"replicas": 4, "resource": {"cpu": 1, "memory": "2522m"}}
    assert stored["spec"]["flinkConfiguration"] == {
        "taskmanager.numberOfTaskSlots": "1",
        "taskmanager.memory.managed.size": "632m",
        "taskmanager.memory.network.min": "144m",
        "taskmanager.memory.network.max": "144m",
        "taskmanager.memory.jvm-overhead.min": "192m",
        "taskmanager.memory.jvm-overhead.max": "192m",
    }
    assert len(_patches(kube)) == 1

    def reconciled(managed: str) -> None:
        status = {
            "jobStatus": {"state": "RUNNING"},
            "lifecycleState": "STABLE",
            "reconciliationStatus": {"lastReconciledSpec": json.dumps(
                {"taskManager": {"replicas": 4}, "flinkConfiguration": {"taskmanager.memory.managed.size": managed}}
            )},
        }  # fmt: skip
        custom.patch_namespaced_custom_object_status(
            "flink.apache.org", "v1beta1", NS, "flinkdeployments", "wordcount", {"status": status},
            _content_type="application/merge-patch+json",
        )  # fmt: skip

    reconciled("158m")
    assert not resource.ready(4)  # the operator runs the old memory still
    reconciled("632m")
    assert resource.ready(4)


class _Assess:
    extensions = ()

    def assess(self, observation: Observation, knowledge) -> Assessment:
        return Assessment(observation.time_s, 4, 100.0, 100.0, 0.0, {4: 200.0}, {4: "observed"})


class _RollBack:
    """Justin's rollback after a level-up that 'improved nothing': back to the memory the job runs (158 MB,
    so the decision does not change memory by the reading) with one worker more."""

    def decide(self, assessment: Assessment, knowledge) -> Decision:
        return Decision(assessment.time_s, 4, 5, "memory-rollback", (), 158.0, 158.0, 0)


def test_a_rollback_after_a_memory_change_that_never_landed_puts_the_template_back(kube, tmp_path):
    """The level-up's pods never came up (no node fits them), so the job still runs 158 MB; the rollback to
    158 MB only scaled the replicas and left 316 MB in the template for every pod started after it."""
    target = KubernetesTarget(DeploymentScale(kube.api(), NS, NAME, 5.0), 2, 0.001, process_base_mb=1890.0)
    target.reconfigure(4, 316.0, now_s=0.0)
    assert target.configured_managed_mb() == 316.0
    store = KnowledgeStore(tmp_path / "knowledge.sqlite")
    source = _Source()  # reads 158 MB: the old pods run on
    loop = MapeLoop(
        source, target, _Assess(), _RollBack(), store.load(KnowledgeSettings()), store, 60.0, 600.0
    )
    result = loop.iterate(460.0)
    assert result.executed and not result.errors
    assert kube.replicas(NS, NAME) == 5 and target.configured_managed_mb() == 158.0
    assert f"{MANAGED}158m" in _container(kube).args


def test_the_configured_managed_memory_is_read_as_flink_reads_sizes():
    assert [parse_mebibytes(t) for t in ("316m", "1g", "2048 mb", "1048576", "0m", "-3m", "lots", None)] == [
        316.0, 1024.0, 2048.0, 1.0, 0.0, None, None, None,
    ]  # fmt: skip


def test_a_forbidden_memory_patch_surfaces_and_leaves_the_deployment(kube):
    kube.fail("PATCH", f"/deployments/{NAME}", *[403] * 5)
    with pytest.raises(ApiException):
        KubernetesTarget(DeploymentScale(kube.api(), NS, NAME, 5.0), 3, 0.001).reconfigure(4, 316.0, 0.0)
    assert len(_patches(kube)) == 1


# ---- following a memory change ---------------------------------------------------------------------
class _Target:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def scale_to(self, scaleout: int, now_s: float) -> None:
        self.calls.append(("scale", scaleout))

    def reconfigure(self, scaleout: int, managed_mb: float, now_s: float) -> None:
        self.calls.append(("memory", scaleout, managed_mb))

    def desired(self) -> int:
        return 3

    def ready(self, scaleout: int) -> bool:
        return True


class _Source:
    def __init__(self) -> None:
        self.managed_mb = 158.0

    def observe(self, now_s: float, window_s: float) -> Observation:
        return Observation(
            now_s,
            window_s,
            np.array([now_s]),
            np.array([1.0]),
            (),
            0.0,
            3,
            600.0,
            managed_memory_mb=self.managed_mb,
        )


def test_a_memory_change_is_followed_until_the_job_runs_with_the_new_memory():
    raw, source = _Target(), _Source()
    follower = RescaleFollower(raw, 300.0)
    follower.check(0.0, 3)  # adopt: nothing pending
    FollowedTarget(raw, follower).reconfigure(3, 316.0, now_s=0.0)
    assert raw.calls == [("memory", 3, 316.0)]
    watched = FollowingSource(source, follower)
    assert any("managed memory 158 MB, not 316" in p for p in watched.observe(60.0, 60.0).problems)
    source.managed_mb = 316.0
    assert watched.observe(120.0, 60.0).problems == ()


def test_a_memory_change_that_times_out_is_named_once_to_the_analysis():
    """The job never ran with 316 MB: the observation after the timeout says so (the memory extension then
    judges no level by it), the next one does not again, and a rescale without memory is not named."""
    raw, source = _Target(), _Source()
    follower = RescaleFollower(raw, 300.0)
    follower.check(0.0, 3)
    FollowedTarget(raw, follower).reconfigure(3, 316.0, now_s=0.0)
    watched = FollowingSource(source, follower)
    assert watched.observe(240.0, 60.0).failed_memory_changes == ()
    assert watched.observe(360.0, 60.0).failed_memory_changes == (FailedMemoryChange(0.0, 316.0),)
    assert watched.observe(420.0, 60.0).failed_memory_changes == ()
    FollowedTarget(raw, follower).scale_to(5, now_s=500.0)  # the job stays at 3: times out too
    assert watched.observe(900.0, 60.0).failed_memory_changes == ()
    FollowedTarget(raw, follower).reconfigure(5, 632.0, now_s=1000.0)
    source.managed_mb = 632.0  # the job runs with it, on fewer TaskManagers than asked: the level ran
    assert watched.observe(1400.0, 60.0).failed_memory_changes == ()


def test_recommend_only_does_not_change_memory_either():
    raw = _Target()
    target = FollowedTarget(raw, RescaleFollower(raw, 300.0), recommend_only=True)
    with pytest.raises(NotApplied, match="316 MB managed memory"):
        target.reconfigure(3, 316.0, now_s=0.0)
    assert raw.calls == []


# ---- the local cluster -----------------------------------------------------------------------------
FAKE_TASKMANAGER = """#!/bin/bash
# stands in for Flink's taskmanager.sh: records its arguments and runs until stopped
echo "$@" >> "$(dirname "$0")/../started.log"
trap 'exit 0' TERM
while true; do sleep 0.2; done
"""


@pytest.fixture
def cluster(tmp_path: Path):
    home = tmp_path / "flink"
    (home / "bin").mkdir(parents=True)
    script = home / "bin" / "taskmanager.sh"
    script.write_text(FAKE_TASKMANAGER)
    script.chmod(0o755)
    cluster = LocalFlinkCluster(home, home / "conf", tmp_path / "state")
    yield cluster
    for pid in cluster.taskmanagers():
        os.kill(pid, signal.SIGKILL)


def _wait_for_lines(path: Path, count: int) -> list[str]:
    """The fake's logged command lines, without each TaskManager's own resource id."""
    import re
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count:
            return [
                re.sub(r" -Dtaskmanager.resource-id=foresail-taskmanager-\d+", "", line) for line in lines
            ]
        time.sleep(0.05)
    raise AssertionError(f"{path}: fewer than {count} lines")


def test_local_taskmanagers_restart_with_the_new_memory(cluster):
    cluster.scale_to(2)
    before = cluster.taskmanagers()
    log = cluster.flink_home / "started.log"
    assert _wait_for_lines(log, 2) == ["start-foreground", "start-foreground"]  # Flink's own configuration
    target = LocalFlinkTarget(cluster, rest=None, process_base_mb=1000.0)
    target.reconfigure(3, 316.0, now_s=0.0)
    after = cluster.taskmanagers()
    assert len(after) == 3 and not set(after) & set(before)  # every TaskManager restarted
    flags = (
        "start-foreground -Dtaskmanager.memory.managed.size=316m -Dtaskmanager.memory.process.size=1316m "
        "-Dtaskmanager.memory.network.min=64m -Dtaskmanager.memory.network.max=64m "  # Flink's minimum
        "-Dtaskmanager.memory.jvm-overhead.min=192m -Dtaskmanager.memory.jvm-overhead.max=192m"
    )
    assert _wait_for_lines(log, 5)[2:] == [flags] * 3
    cluster.scale_to(4)  # a later scale-out starts TaskManagers with the memory last set
    assert _wait_for_lines(log, 6)[5] == flags
    assert LocalFlinkCluster(cluster.flink_home, cluster.conf_dir, cluster.state_dir).memory() == {
        "managed_mb": 316.0,
        "process_mb": 1316.0,
    }  # a restarted daemon finds it


class _Registered:
    """Flink's /taskmanagers as the local targets read it: resource id → tasks."""

    def __init__(self, tasks: dict[str, int] | None) -> None:
        self.tasks = tasks

    def taskmanager_tasks(self) -> dict[str, int]:
        if self.tasks is None:
            raise requests.ConnectionError("the JobManager does not answer")
        return dict(self.tasks)


def test_taskmanagers_foresail_did_not_start_count_toward_the_scale_out_and_stay(cluster):
    """A TaskManager started with Flink's scripts was invisible: desired() read 0, so a 'rescale to 0' was
    adopted at start-up, and scale_to(2) started 2 beside it (3 ran)."""
    cluster.scale_to(1)
    rest = _Registered({**dict.fromkeys(cluster.own_ids(), 1), "10.0.0.9:6122-theirs": 1})
    target = LocalFlinkTarget(cluster, rest)
    assert target.desired() == 2
    target.scale_to(3, now_s=0.0)
    assert len(cluster.taskmanagers()) == 2  # 2 of foresail's beside theirs
    target.scale_to(1, now_s=60.0)
    assert cluster.taskmanagers() == []  # theirs stays: the scale-out cannot go below it
    rest.tasks = None
    assert target.desired() is None  # not known: nothing is adopted on a guess


def test_a_per_vertex_target_counts_only_its_own_registered_taskmanagers_and_stops_only_free_ones(cluster):
    """A killed TaskManager that Flink still lists made a new one look registered: the PUT went out early.
    And a TaskManager-only change (a configuration clamped to max_scaleout) stopped the newest TaskManager,
    which held a task."""
    from backends.localflink import LocalFlinkVertexTarget, LocalTaskManagers

    cluster.scale_to(2)
    oldest, newest = (cluster.resource_id(pid) for pid in cluster.taskmanagers())
    rest = _Registered({oldest: 0, "foresail-taskmanager-killed": 0})
    assert LocalTaskManagers(cluster, rest).registered() == 1
    rest.tasks = {oldest: 0, newest: 2}
    target = LocalFlinkVertexTarget(cluster, rest)
    target.scale_to(1, now_s=0.0)
    assert [cluster.resource_id(pid) for pid in cluster.taskmanagers()] == [newest]


def test_one_of_foresails_own_taskmanagers_flink_still_lists_after_it_died_is_not_foreign(cluster):
    """Counted by the pid file, a crashed TaskManager of foresail's that Flink listed until its heartbeat
    timed out read as foreign: scale_to(3) started none to replace it."""
    cluster.scale_to(3)
    rest = _Registered(dict.fromkeys((cluster.resource_id(pid) for pid in cluster.taskmanagers()), 1))
    os.kill(cluster.taskmanagers()[-1], signal.SIGKILL)
    wait_for(lambda: len(cluster.taskmanagers()) == 2, 10, "the crashed TaskManager gone")
    target = LocalFlinkTarget(cluster, rest)
    assert target.foreign_taskmanagers() == 0
    target.scale_to(3, now_s=0.0)
    assert len(cluster.taskmanagers()) == 3
