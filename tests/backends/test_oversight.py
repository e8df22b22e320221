"""Events, pause and refusal on the scaled object, against kmock: a Kubernetes API *emulator* served over
real HTTP (no real API server can run on these machines; see kube_emulator.py for what it does not
emulate). The official client talks to it as to a cluster."""

from __future__ import annotations

import pytest
from kubernetes import client

from backends.oversight import PAUSE_ANNOTATION, Oversight
from config.backends import KubernetesConfig
from messages.types import Decision
from tests.backends.kube_emulator import KubeEmulator

NS, NAME = "flink", "flink-taskmanager"


@pytest.fixture
def kube():
    with KubeEmulator() as emulator:  # kmock: an emulator, not a real API server
        emulator.create_deployment(NS, NAME, replicas=4)
        yield emulator


def _oversight(kube: KubeEmulator, resource: str = "deployment") -> Oversight:
    return Oversight(kube.api(), KubernetesConfig(resource=resource, namespace=NS, name=NAME))


def _events(kube: KubeEmulator) -> list[dict]:
    try:
        events = client.CoreV1Api(kube.api()).list_namespaced_event(NS).items
    except client.ApiException as error:  # kmock knows a kind only once an object of it was created
        assert error.status == 404
        return []
    return [client.ApiClient().sanitize_for_serialization(e) for e in events]


def _annotate(kube: KubeEmulator, value: str | None) -> None:
    client.AppsV1Api(kube.api()).patch_namespaced_deployment(
        NAME, NS, {"metadata": {"annotations": {PAUSE_ANNOTATION: value}}}
    )


def test_a_rescale_is_an_event_on_the_deployment_naming_its_rule(kube):
    oversight = _oversight(kube)
    assert oversight.blocked() is None  # reads the object (and its uid)
    decision = Decision(
        time_s=60.0, current_scaleout=4, target_scaleout=6, rule="long-lived", reasons=("peak",)
    )
    oversight.iteration(decision, executed=True, errors={})
    (event,) = _events(kube)
    assert event["reason"] == "SuccessfulRescale" and event["type"] == "Normal"
    assert event["message"] == "New size: 6; rule: long-lived; reason: peak"
    assert event["involvedObject"]["kind"] == "Deployment" and event["involvedObject"]["name"] == NAME
    assert event["involvedObject"]["namespace"] == NS and event["source"]["component"] == "foresail"


def test_a_hold_makes_no_event_and_a_failed_rescale_a_warning(kube):
    oversight = _oversight(kube)
    hold = Decision(time_s=60.0, current_scaleout=4, target_scaleout=4, rule="stabilization")
    oversight.iteration(hold, executed=False, errors={})
    assert _events(kube) == []
    oversight.iteration(hold, executed=False, errors={"execute": "ApiException: (403) Forbidden"})
    (event,) = _events(kube)
    assert event["reason"] == "FailedRescale" and event["type"] == "Warning" and "403" in event["message"]


def test_the_pause_annotation_blocks_until_removed_with_one_event_each_way(kube):
    oversight = _oversight(kube)
    _annotate(kube, "true")
    assert "paused by the annotation foresail.io/paused" in oversight.blocked()
    assert oversight.blocked() is not None  # still paused: no second event
    _annotate(kube, None)
    assert oversight.blocked() is None
    assert [e["reason"] for e in _events(kube)] == ["Paused", "Resumed"]


def test_an_hpa_on_the_same_deployment_is_refused(kube):
    oversight = _oversight(kube)
    client.AutoscalingV2Api(kube.api()).create_namespaced_horizontal_pod_autoscaler(
        NS,
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "tm-cpu", "namespace": NS},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME},
                "minReplicas": 1,
                "maxReplicas": 10,
            },
        },
    )
    reason = oversight.blocked()
    assert reason and "HorizontalPodAutoscaler flink/tm-cpu" in reason
    assert [e["reason"] for e in _events(kube)] == ["ConflictingAutoscaler"]


def test_the_flink_operators_autoscaler_is_refused(kube):
    client.CustomObjectsApi(kube.api()).create_namespaced_custom_object(
        "flink.apache.org",
        "v1beta1",
        NS,
        "flinkdeployments",
        {
            "apiVersion": "flink.apache.org/v1beta1",
            "kind": "FlinkDeployment",
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {"flinkConfiguration": {"job.autoscaler.enabled": "true"}, "job": {"parallelism": 2}},
        },
    )
    reason = _oversight(kube, "flinkdeployment").blocked()
    assert reason and "job.autoscaler.enabled" in reason


def test_an_unreachable_api_never_raises(kube):
    oversight = _oversight(kube)
    kube.fail("GET", f"/deployments/{NAME}", 500, 500)
    assert oversight.blocked() is None  # no block known: the target's own calls will say what fails


def test_a_recommendation_is_a_normal_event_not_a_failed_rescale(kube):
    """Recommend-only and dry run: the decision is an Event of its own, never a FailedRescale warning."""
    oversight = _oversight(kube)
    oversight.blocked()
    decision = Decision(time_s=60.0, current_scaleout=4, target_scaleout=6, rule="long-lived")
    oversight.iteration(
        decision, executed=False, errors={}, recommendation="dry run: scale-out 6 recommended"
    )
    (event,) = _events(kube)
    assert event["reason"] == "RecommendedRescale" and event["type"] == "Normal"
