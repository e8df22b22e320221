"""The daemon as a process on Kubernetes (kmock: an API *emulator* over real HTTP, because no real API
server can run here): an HPA on the same Deployment makes it refuse to act, visibly, until it is gone;
its audit events name the job and the target."""

from __future__ import annotations

import requests
from kubernetes import client

from tests.backends.kube_emulator import KubeEmulator
from tests.e2e.daemon_process import DaemonProcess
from tests.e2e.stack import PrometheusServer, free_port, wait_for

NS, NAME = "flink", "flink-taskmanager"


def _events(kube: KubeEmulator) -> list[str]:
    try:
        return [e.reason for e in client.CoreV1Api(kube.api()).list_namespaced_event(NS).items]
    except client.ApiException:  # kmock knows events only after the first one
        return []


def test_a_conflicting_hpa_is_refused_visibly_until_it_is_deleted(tmp_path):
    prometheus = PrometheusServer(tmp_path / "prometheus")  # scrapes nothing: every iteration holds
    port = free_port()
    config = {
        "target": {"kind": "prometheus+kubernetes"},
        "loop": {"interval_s": 0.5},
        "prometheus": {"url": prometheus.url, "timeout_s": 1, "retries": 0},
        "kubernetes": {"kubeconfig": str(tmp_path / "kubeconfig"), "namespace": NS, "name": NAME,
                       "leader_election": False},
        "knowledge": {"path": str(tmp_path / "k.sqlite")},
        "server": {"host": "127.0.0.1", "port": port},
    }  # fmt: skip
    with prometheus, KubeEmulator() as kube:
        kube.create_deployment(NS, NAME, replicas=2)
        kube.kubeconfig(tmp_path / "kubeconfig")
        hpas = client.AutoscalingV2Api(kube.api())
        hpas.create_namespaced_horizontal_pod_autoscaler(
            NS,
            {
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "tm-cpu", "namespace": NS},
                "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME},
                         "maxReplicas": 8},
            },
        )  # fmt: skip
        daemon = DaemonProcess(config, tmp_path, "live")
        try:
            refused = daemon.wait_event(lambda e: e.get("event") == "not-acting", 60, "a refusal")
            assert "HorizontalPodAutoscaler flink/tm-cpu" in refused["reason"]
            wait_for(lambda: "ConflictingAutoscaler" in _events(kube), 30, "the ConflictingAutoscaler event")
            metrics = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            assert "foresail_paused 1.0" in metrics
            hpas.delete_namespaced_horizontal_pod_autoscaler("tm-cpu", NS)
            wait_for(lambda: "Resumed" in _events(kube), 30, "the Resumed event")
            assert _events(kube).count("ConflictingAutoscaler") == 1  # one event per change, not per loop
        finally:
            daemon.terminate()
    events = daemon.snapshot()
    strays = [e for e in events if e.get("target") != f"deployment/{NS}/{NAME}" or e.get("job") != NAME]
    assert events and not strays, strays[:3]
    assert all(e.get("target") == f"deployment/{NS}/{NAME}" and e.get("job") == NAME for e in events)
