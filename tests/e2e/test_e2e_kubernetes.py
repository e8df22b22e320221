"""End to end through the Kubernetes API: `foresail run` with the Kubernetes target patches the
TaskManager Deployment's scale subresource on kmock (an emulator of the Kubernetes API over real HTTP: no
real API server can run here); a test-side controller turns the replicas into TaskManager processes of the
real Flink cluster, scraped by the real Prometheus. The daemon holds the leader Lease while it acts."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from tests.backends.kube_emulator import KubeEmulator
from tests.e2e.controller import TaskManagerController
from tests.e2e.daemon_process import DaemonProcess, executed
from tests.e2e.scenario import daemon_config, record_figures, rise_until_scale_out

pytestmark = pytest.mark.e2e

NS, NAME = "flink", "flink-taskmanager"


def test_daemon_scales_the_deployment_and_flink_follows_through_a_controller(stack, tmp_path):
    flink, prometheus = stack.flink, stack.prometheus
    flink.wait_parallelism(1, timeout_s=60)
    stack.settle()
    low = stack.light_load_rps()
    with KubeEmulator() as kube:
        kube.create_deployment(NS, NAME, replicas=1)
        kube.kubeconfig(tmp_path / "kubeconfig")
        target = {"kind": "prometheus+kubernetes"}
        config = daemon_config(flink, prometheus.url, tmp_path, target)
        config["kubernetes"] = {
            "kubeconfig": str(tmp_path / "kubeconfig"), "namespace": NS, "name": NAME, "readiness_timeout_s": 90,
            "identity": "foresail-e2e", "lease_duration_s": 10, "renew_period_s": 2, "retry_backoff_s": 0.1,
        }  # fmt: skip
        with TaskManagerController(kube.api(), NS, NAME, flink.cluster, flink.rest) as controller:
            daemon = DaemonProcess(config, tmp_path, "kubernetes")
            try:
                daemon.wait_event(lambda e: e.get("event") == "leader-acquired", 30, "the leader Lease")
                daemon.wait_event(
                    lambda e: e.get("event") == "iteration" and (e.get("capacity_rps") or {}).get("1"),
                    120,
                    "a capacity for one worker",
                )
                rise_s, decided = rise_until_scale_out(flink, daemon, stack.capacity_rps)
                scaled = decided["decision"]["target_scaleout"]
                assert kube.replicas(NS, NAME) == scaled >= 2
                flink.wait_parallelism(scaled, timeout_s=120)
                out_s = time.time() - rise_s
                daemon.wait_event(
                    lambda e: e.get("event") == "rescale-ready", 60, "the rescale followed to ready"
                )

                fall_s = flink.trace.hold(low)
                daemon.wait_event(executed("scale_in"), 150, "a scale-in decision")
                flink.wait_parallelism(1, timeout_s=60)
                in_s = time.time() - fall_s
                assert kube.replicas(NS, NAME) == 1
                assert daemon.terminate() == 0
            finally:
                if daemon.process.poll() is None:
                    daemon.kill()
            assert controller.changes[0] == (1, scaled) and controller.changes[-1][1] == 1
            assert [after for _, after in controller.changes] == [
                p.data["spec"]["replicas"] for p in kube.requests("PATCH", "/scale")
            ]
        patches = [p.data["spec"]["replicas"] for p in kube.requests("PATCH", f"/deployments/{NAME}/scale")]
        decisions = [e["decision"]["target_scaleout"] for e in daemon.iterations() if e["executed"]]
        assert patches == decisions and patches[0] == scaled and patches[-1] == 1  # one patch per decision
        assert daemon.implausible() == [], daemon.audit_path  # real Flink's metrics, clean all through
        lease = client.CoordinationV1Api(kube.api()).read_namespaced_lease("foresail-leader", NS)
        assert lease.spec.holder_identity == ""  # handed back on SIGTERM
    record_figures(
        "kubernetes-path",
        {"load_rise_to_parallelism_s": round(out_s, 1), "load_fall_to_parallelism_1_s": round(in_s, 1),
         "scaleout_target": scaled},
    )  # fmt: skip
