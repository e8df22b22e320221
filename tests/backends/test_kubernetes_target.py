"""The Kubernetes target against kmock, a Kubernetes API *emulator* served over real HTTP (no real API
server can run here; see kube_emulator.py for what it does not emulate)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from backends.execution import FollowedTarget, NotApplied, RescaleFollower
from backends.kubernetes import (
    AbsentField,
    DeploymentScale,
    FlinkDeploymentScale,
    KubernetesTarget,
    NotLeader,
    api_client,
    make_resource,
)
from backends.retry import RetriesExhausted
from config.backends import KubernetesConfig
from tests.backends.kube_emulator import KubeEmulator

NS, NAME = "flink", "flink-taskmanager"


@pytest.fixture
def kube():
    with KubeEmulator() as emulator:
        emulator.create_deployment(NS, NAME, replicas=1)
        yield emulator


def _target(kube: KubeEmulator, retries: int = 3, leadership=None) -> KubernetesTarget:
    return KubernetesTarget(DeploymentScale(kube.api(), NS, NAME, 5.0), retries, 0.001, leadership)


def test_scales_the_deployment_through_its_scale_subresource_with_one_patch(kube):
    _target(kube).scale_to(3, now_s=0.0)
    assert kube.replicas(NS, NAME) == 3
    patches = kube.requests("PATCH")
    assert len(patches) == 1 and str(patches[0].url.path).endswith(f"/deployments/{NAME}/scale")
    assert patches[0].data == {"spec": {"replicas": 3}}
    assert kube.requests("PUT") == []


def test_conflicts_throttling_and_server_errors_are_retried_until_the_patch_lands(kube):
    kube.fail("PATCH", "/scale", 409, 429, 503)
    _target(kube, retries=4).scale_to(2, now_s=0.0)
    assert len(kube.requests("PATCH", "/scale")) == 4
    assert kube.replicas(NS, NAME) == 2


def test_a_persistent_server_error_gives_up_after_the_retry_budget(kube):
    kube.fail("PATCH", "/scale", *[500] * 100)
    with pytest.raises(RetriesExhausted, match="gave up after 3 attempts") as raised:
        _target(kube, retries=2).scale_to(4, now_s=0.0)
    assert isinstance(raised.value.__cause__, ApiException) and raised.value.__cause__.status == 500
    assert len(kube.requests("PATCH", "/scale")) == 3  # first try + 2 retries


def test_a_forbidden_patch_is_not_retried(kube):
    kube.fail("PATCH", "/scale", *[403] * 100)
    with pytest.raises(ApiException):
        _target(kube, retries=5).scale_to(4, now_s=0.0)
    assert len(kube.requests("PATCH", "/scale")) == 1


def test_readiness_needs_every_replica_of_the_new_spec_ready(kube):
    target = _target(kube)
    target.scale_to(3, now_s=0.0)
    assert target.desired() == 3
    assert not target.ready(3)
    kube.set_deployment_status(NS, NAME, ready=2)
    assert not target.ready(3)
    kube.set_deployment_status(NS, NAME, ready=3)
    assert target.ready(3)
    assert not target.ready(2)  # the spec says 3


class _Leadership:
    def __init__(self, leader: bool) -> None:
        self.leader = leader

    def is_leader(self) -> bool:
        return self.leader


def test_a_replica_that_is_not_the_leader_never_patches(kube):
    with pytest.raises(NotLeader):
        _target(kube, leadership=_Leadership(False)).scale_to(5, now_s=0.0)
    assert kube.requests("PATCH") == []
    _target(kube, leadership=_Leadership(True)).scale_to(5, now_s=0.0)
    assert kube.replicas(NS, NAME) == 5


def test_recommend_only_logs_the_decision_and_sends_nothing(kube):
    raw = _target(kube)
    target = FollowedTarget(raw, RescaleFollower(raw, 60.0), recommend_only=True)
    with pytest.raises(NotApplied, match="recommend-only"):
        target.scale_to(4, now_s=0.0)
    assert kube.requests("PATCH") == []
    assert kube.replicas(NS, NAME) == 1


def test_a_flinkdeployment_gets_its_parallelism_field_patched_and_keeps_the_rest(kube):
    custom = client.CustomObjectsApi(kube.api())
    custom.create_namespaced_custom_object(
        "flink.apache.org",
        "v1beta1",
        NS,
        "flinkdeployments",
        {
            "apiVersion": "flink.apache.org/v1beta1",
            "kind": "FlinkDeployment",
            "metadata": {"name": "wordcount", "namespace": NS},
            "spec": {"flinkVersion": "v2_0", "job": {"jarURI": "local:///job.jar", "parallelism": 2}},
        },
    )
    resource = FlinkDeploymentScale(kube.api(), NS, "wordcount", "spec.job.parallelism", 5.0)
    KubernetesTarget(resource, 2, 0.001).scale_to(6, now_s=0.0)
    stored = custom.get_namespaced_custom_object(
        "flink.apache.org", "v1beta1", NS, "flinkdeployments", "wordcount"
    )
    assert stored["spec"]["job"] == {"jarURI": "local:///job.jar", "parallelism": 6}
    assert resource.desired() == 6
    assert not resource.ready(6)  # the operator has not reconciled it yet
    status = {
        "jobStatus": {"state": "RUNNING"},
        "lifecycleState": "STABLE",
        "reconciliationStatus": {"lastReconciledSpec": json.dumps({"job": {"parallelism": 6}})},
    }
    custom.patch_namespaced_custom_object_status(
        "flink.apache.org", "v1beta1", NS, "flinkdeployments", "wordcount", {"status": status},
        _content_type="application/merge-patch+json",
    )  # fmt: skip
    assert resource.ready(6)


def test_a_misspelt_parallelism_path_is_refused_and_the_flinkdeployment_left_as_it_is(kube):
    """The operator's schema would prune a created field: every rescale would then time out unseen."""
    custom = client.CustomObjectsApi(kube.api())
    spec = {"job": {"jarURI": "local:///job.jar", "parallelism": 2}}
    custom.create_namespaced_custom_object(
        "flink.apache.org", "v1beta1", NS, "flinkdeployments",
        {"apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment",
         "metadata": {"name": "wordcount", "namespace": NS}, "spec": spec},
    )  # fmt: skip
    for path in ("spec.job.paralelism", "spec.taskManager.replicas"):
        resource = FlinkDeploymentScale(kube.api(), NS, "wordcount", path, 5.0)
        assert resource.desired() is None
        with pytest.raises(AbsentField, match=path):
            KubernetesTarget(resource, 2, 0.001).scale_to(6, now_s=0.0)
        with pytest.raises(AbsentField, match=path):
            resource.set_configuration(6, 512.0, 2402.0)
    stored = custom.get_namespaced_custom_object(
        "flink.apache.org", "v1beta1", NS, "flinkdeployments", "wordcount"
    )
    assert stored["spec"] == spec


def test_credentials_come_from_a_kubeconfig_file(kube, tmp_path: Path):
    kube.kubeconfig(tmp_path / "kubeconfig")
    settings = KubernetesConfig(kubeconfig=str(tmp_path / "kubeconfig"), namespace=NS, name=NAME)
    resource = make_resource(api_client(settings), settings)
    assert resource.desired() == 1
    assert kube.requests("GET")[-1].headers["Authorization"] == "Bearer test-token"


def test_in_a_pod_the_service_account_is_used(tmp_path: Path, monkeypatch):
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_text("not checked until a request is made\n")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    configuration = api_client(KubernetesConfig(), service_account_dir=tmp_path).configuration
    assert configuration.host == "https://10.96.0.1:443"
    assert configuration.auth_settings()["BearerToken"]["value"].lower() == "bearer sa-token"
    assert configuration.ssl_ca_cert == str(tmp_path / "ca.crt")
