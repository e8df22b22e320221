"""A server that sends its headers, then one byte at a time, never finishing its answer: `requests`' timeout
(and the Kubernetes client's) bounds each read, not the answer, and it held an iteration (and SIGTERM, which
waits for it) for good. A fake server: a real Prometheus, Flink or API server cannot be made to drip."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest
import requests
import urllib3

from backends.flinkrest import FlinkRest
from backends.kubernetes import DeploymentScale, api_client
from backends.prometheus import PrometheusClient
from config.backends import KubernetesConfig, PrometheusConfig
from tests.backends.fake_http import raw_server, send_headers


@pytest.fixture
def dripping_url():
    def drip(handler: BaseHTTPRequestHandler) -> None:
        send_headers(handler, 1000000)
        try:
            while not stopped.is_set():
                handler.wfile.write(b" ")  # whitespace: valid JSON, if it ever ended
                handler.wfile.flush()
                stopped.wait(0.05)  # the server's pace, well inside each read's timeout
        except OSError:  # the client gave up
            pass

    stopped = threading.Event()
    with raw_server(drip) as url:
        yield url
        stopped.set()


def _within(seconds: float, call) -> object:
    """The call's result, or a failure if it has not returned after `seconds` (it used to never return)."""
    result: list = []
    worker = threading.Thread(target=lambda: result.append(call()), daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still reading after {time.monotonic() - started:.0f} s"
    return result[0]


def test_a_dripping_flink_rest_api_is_not_known_to_run(dripping_url):
    assert _within(20, lambda: FlinkRest(dripping_url, timeout_s=0.5).job_status()) is None


def test_a_dripping_prometheus_times_out(dripping_url):
    client = PrometheusClient(PrometheusConfig(url=dripping_url, timeout_s=0.5, retries=0))

    def query() -> str:
        try:
            client.instant("up", time.time())
        except requests.Timeout as error:
            return str(error)
        return "answered"

    assert "the answer took over 1.5 s" in _within(20, query)


def test_a_dripping_kubernetes_api_server_times_out(dripping_url, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: drip\n"
        f"clusters: [{{name: drip, cluster: {{server: '{dripping_url}'}}}}]\n"
        "users: [{name: drip, user: {token: t}}]\n"
        "contexts: [{name: drip, context: {cluster: drip, user: drip}}]\n"
    )
    api = api_client(KubernetesConfig(kubeconfig=str(kubeconfig), namespace="flink", name="tm"))
    deployment = DeploymentScale(api, "flink", "tm", timeout_s=0.5)

    def read() -> str:
        try:
            deployment.desired()
        except urllib3.exceptions.TimeoutError as error:
            return str(error)
        return "answered"

    assert "the answer took over 1.5 s" in _within(20, read)
