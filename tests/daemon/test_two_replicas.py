"""Two daemon replicas as processes against one Kubernetes API (kmock, an emulator over real HTTP): only
the Lease holder runs the loop; when it stops, the other takes over."""

from __future__ import annotations

from tests.backends.kube_emulator import KubeEmulator
from tests.e2e.daemon_process import DaemonProcess
from tests.e2e.stack import PrometheusServer, free_port, wait_for


def _config(tmp_path, prometheus_url: str, identity: str) -> dict:
    return {
        "target": {"kind": "prometheus+kubernetes"},
        "loop": {"interval_s": 0.5},
        "prometheus": {"url": prometheus_url, "timeout_s": 1, "retries": 0},
        "kubernetes": {"kubeconfig": str(tmp_path / "kubeconfig"), "namespace": "flink", "identity": identity,
                       "lease_duration_s": 3, "renew_period_s": 0.5},
        "knowledge": {"path": str(tmp_path / f"{identity}.sqlite")},
        "server": {"host": "127.0.0.1", "port": free_port()},
    }  # fmt: skip


def test_only_the_lease_holder_iterates_and_the_standby_takes_over_when_it_stops(tmp_path):
    # a real Prometheus scraping nothing: every iteration holds
    with PrometheusServer(tmp_path / "prometheus") as prometheus, KubeEmulator() as kube:
        kube.create_deployment("flink", "flink-taskmanager", replicas=2)
        kube.kubeconfig(tmp_path / "kubeconfig")
        first = DaemonProcess(_config(tmp_path, prometheus.url, "replica-a"), tmp_path, "a")
        second = None
        try:
            first.wait_event(lambda e: e.get("event") == "leader-acquired", 60, "replica a leading")
            second = DaemonProcess(_config(tmp_path, prometheus.url, "replica-b"), tmp_path, "b")
            second.wait_event(lambda e: e.get("event") == "standby", 60, "replica b standing by")
            wait_for(lambda: len(first.iterations()) >= 3, 30, "replica a iterating")
            assert second.iterations() == []
            assert first.terminate() == 0  # hands the Lease back
            second.wait_event(lambda e: e.get("event") == "leader-acquired", 30, "replica b taking over")
            wait_for(lambda: second.iterations(), 30, "replica b iterating")
        finally:
            for daemon in (first, second):
                if daemon is not None and daemon.process.poll() is None:
                    daemon.kill()
    assert all(e["decision"]["rule"] == "hold-bad-data" for e in first.iterations() + second.iterations())
