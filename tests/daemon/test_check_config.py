"""`foresail check-config` with real backends: the file, then Prometheus and the target (Kubernetes via
kmock, an emulator of its API over real HTTP)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from backends.prometheus import REQUIRED_QUERIES
from config.backends import PrometheusConfig
from daemon.cli import main
from tests.backends.fake_http import FakeServer
from tests.backends.kube_emulator import KubeEmulator
from tests.e2e.stack import PrometheusServer

VECTOR_QUERIES = {f: "vector(1)" for f in PrometheusConfig.model_fields if f.startswith("query_")}
"""Queries a real Prometheus scraping nothing always answers with a series."""


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """A real Prometheus (scraping nothing) for the tests whose queries are all `vector(1)`."""
    server = PrometheusServer(tmp_path_factory.mktemp("prometheus"))
    yield server.url
    server.stop()


def _closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def _write(
    tmp_path: Path, prometheus_url: str, kubeconfig: Path, name: str = "flink-taskmanager", **kubernetes
) -> Path:
    path = tmp_path / "foresail.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "target": {"kind": "prometheus+kubernetes"},
                "prometheus": {"url": prometheus_url, "timeout_s": 1, "retries": 0, **VECTOR_QUERIES},
                "kubernetes": {
                    "kubeconfig": str(kubeconfig),
                    "namespace": "flink",
                    "name": name,
                    "retries": 0,
                    **kubernetes,
                },
            }
        )
    )
    return path


def test_reports_ok_when_prometheus_answers_and_the_deployment_exists(tmp_path, prometheus, capsys):
    with KubeEmulator() as kube:
        kube.create_deployment("flink", "flink-taskmanager", replicas=2)
        kube.kubeconfig(tmp_path / "kubeconfig")
        assert main(["check-config", str(_write(tmp_path, prometheus, tmp_path / "kubeconfig"))]) == 0
    out = capsys.readouterr().out
    assert f"prometheus {prometheus}: OK" in out
    assert "deployment flink/flink-taskmanager (scale-out 2): OK" in out


def test_a_flinkdeployment_without_the_configured_parallelism_field_fails(tmp_path, prometheus, capsys):
    with KubeEmulator() as kube:
        client.CustomObjectsApi(kube.api()).create_namespaced_custom_object(
            "flink.apache.org", "v1beta1", "flink", "flinkdeployments",
            {"apiVersion": "flink.apache.org/v1beta1", "kind": "FlinkDeployment",
             "metadata": {"name": "wordcount", "namespace": "flink"},
             "spec": {"job": {"jarURI": "local:///job.jar", "parallelism": 2}}},
        )  # fmt: skip
        kube.kubeconfig(tmp_path / "kubeconfig")
        kubeconfig = tmp_path / "kubeconfig"
        right = _write(tmp_path, prometheus, kubeconfig, "wordcount", resource="flinkdeployment")
        assert main(["check-config", str(right)]) == 0
        assert "flinkdeployment flink/wordcount (scale-out 2): OK" in capsys.readouterr().out
        wrong = _write(
            tmp_path, prometheus, kubeconfig, "wordcount",
            resource="flinkdeployment", parallelism_path="spec.job.paralelism",
        )  # fmt: skip
        assert main(["check-config", str(wrong)]) != 0
    assert "spec.job.paralelism holds no parallelism" in capsys.readouterr().out


def test_fails_naming_what_does_not_answer(tmp_path, capsys):
    with KubeEmulator() as kube:
        kube.kubeconfig(tmp_path / "kubeconfig")
        config = _write(tmp_path, _closed_port_url(), tmp_path / "kubeconfig", name="missing")
        assert main(["check-config", str(config)]) == 1
    out = capsys.readouterr().out
    assert "prometheus http://127.0.0.1:" in out and "FAILED: ConnectionError" in out
    assert "deployment flink/missing: FAILED: NotFoundException" in out


def test_every_query_is_tried_once_a_required_one_without_series_fails_an_optional_one_is_named(
    tmp_path, capsys
):
    """A real Prometheus (scraping nothing): `vector(1)` always answers, `absent_metric` never does."""
    server = PrometheusServer(tmp_path / "prometheus")
    queries = dict(VECTOR_QUERIES)
    queries["query_state_cache_hits"] = "vector(1) or rate(absent_metric[$window])"  # a parse error unfilled
    try:
        with KubeEmulator() as kube:
            kube.create_deployment("flink", "flink-taskmanager", replicas=2)
            kube.kubeconfig(tmp_path / "kubeconfig")
            path = _write(tmp_path, server.url, tmp_path / "kubeconfig")
            config = yaml.safe_load(path.read_text())
            for missing, code in (("query_latency_ms", 0), ("query_backlog", 1)):
                config["prometheus"] |= queries | {missing: "absent_metric"}
                path.write_text(yaml.safe_dump(config))
                assert main(["check-config", str(path)]) == code
                out = capsys.readouterr().out
                assert (
                    out.count(": OK") == len(queries) + 2
                )  # the file, Prometheus, the other queries, the deployment
                problem = "no series now (is the job running and scraped, are the names right?)"
                if missing in REQUIRED_QUERIES:
                    assert f"prometheus.{missing}: FAILED: {problem}" in out
                else:
                    assert f"prometheus.{missing}: optional, the loop runs without it: {problem}" in out
    finally:
        server.stop()


def test_no_connect_only_validates_the_file(tmp_path, capsys):
    config = _write(tmp_path, _closed_port_url(), tmp_path / "absent-kubeconfig")
    assert main(["check-config", "--no-connect", str(config)]) == 0
    assert "FAILED" not in capsys.readouterr().out


def _flink_with(settings: dict[str, str]) -> FakeServer:
    """A JobManager whose /jobmanager/config holds `settings` (a real one runs in tests/e2e)."""
    body = json.dumps([{"key": k, "value": v} for k, v in settings.items()]).encode()
    return FakeServer(lambda handler: (200, body) if handler.path == "/jobmanager/config" else (404, b"{}"))


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (
            {"scheduler-mode": "reactive", "jobmanager.scheduler": "adaptive"},
            "runs reactive mode, which refuses",
        ),
        ({"jobmanager.scheduler": "default"}, "runs the default scheduler"),
        ({}, "runs the default scheduler"),
        ({"jobmanager.scheduler": "adaptive"}, None),
    ],
)
def test_vertex_granularity_names_a_cluster_without_the_adaptive_scheduler_a_configuration_error(
    tmp_path, prometheus, settings, expected
):
    from backends.factory import check_connections
    from config.load import load_config

    flink = _flink_with(settings)
    with KubeEmulator() as kube:
        kube.create_deployment("flink", "flink-taskmanager", replicas=1)
        kube.kubeconfig(tmp_path / "kubeconfig")
        path = _write(tmp_path, prometheus, tmp_path / "kubeconfig")
        config = yaml.safe_load(path.read_text())
        config["prometheus"]["flink_rest_url"] = flink.url
        path.write_text(yaml.safe_dump(config))
        checks = {w: p for w, p, _ in check_connections(load_config(path), granularity_override="vertex")}
        job_level = {w: p for w, p, _ in check_connections(load_config(path))}
    flink.close()
    problem = checks[f"per-vertex rescaling through {flink.url}"]
    if expected is None:
        assert problem is None
    else:
        assert (
            problem.startswith("configuration error: scaling.granularity is vertex") and expected in problem
        )
    assert not any(what.startswith("per-vertex") for what in job_level)  # job granularity: not asked


V1, V2 = json.dumps({"flink-version": "1.20.0"}).encode(), json.dumps({"flink-version": "2.3.0"}).encode()


@pytest.mark.parametrize(
    ("answer", "at_checkpoint", "expected"),
    [
        (V1, True, "note: Flink 1.20.0 rolls a scale-out back"),
        (V1, False, None),
        (V2, True, "note: Flink 2.3.0 restarts a scale-out from a checkpoint that just completed"),
        (V2, False, None),  # off measured better on Flink 2.x too
        (b"<html>proxy error</html>", True, "note: cannot read the Flink version at "),
        (None, True, "note: cannot read the Flink version at "),  # nothing listens
        (None, False, None),  # off suits every version: not asked
    ],
)
def test_check_config_notes_what_the_restart_setting_does_on_the_clusters_flink(
    tmp_path, prometheus, capsys, answer, at_checkpoint, expected
):
    """recovery.scale_out_at_checkpoint against the cluster's Flink. A Flink 1.x JobManager is a stand-in
    here (only 2.3 runs on this machine; the e2e suite checks the real 2.3 one); an HTML answer and a closed
    port give one line, never a traceback."""
    flink = FakeServer(lambda handler: (200, answer)) if answer is not None else None
    url = flink.url if flink else _closed_port_url()
    with KubeEmulator() as kube:
        kube.create_deployment("flink", "flink-taskmanager", replicas=1)
        kube.kubeconfig(tmp_path / "kubeconfig")
        path = _write(tmp_path, prometheus, tmp_path / "kubeconfig")
        config = yaml.safe_load(path.read_text())
        config["prometheus"]["flink_rest_url"] = url
        config["recovery"] = {"scale_out_at_checkpoint": at_checkpoint}
        path.write_text(yaml.safe_dump(config))
        assert main(["check-config", str(path)]) == 0
    if flink:
        flink.close()
    notes = [line.strip() for line in capsys.readouterr().out.splitlines() if "Flink" in line]
    if expected is None:
        assert notes == []
    else:
        assert len(notes) == 1 and notes[0].startswith(expected), notes
