"""The daemon's /healthz and /metrics endpoint."""

from __future__ import annotations

import numpy as np
import requests

from daemon.health import DaemonMetrics, HealthServer
from mape.loop import IterationResult
from messages.types import Assessment, Decision


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _result(action_target: int) -> IterationResult:
    assessment = Assessment(
        time_s=60.0, current_scaleout=2, workload_avg_rps=900.0, workload_max_rps=1000.0, backlog_records=10.0,
        capacities_rps={1: 600.0, 2: 1200.0, 3: 1800.0}, capacity_sources={1: "observed", 3: "extrapolated"},
        forecast_rps=np.full(900, 1100.0),
    )  # fmt: skip
    decision = Decision(60.0, 2, action_target, "smallest-sufficient")
    return IterationResult(60.0, assessment=assessment, decision=decision, executed=action_target != 2)


def test_healthz_fails_once_iterations_stop_for_the_configured_number_of_loops():
    clock = Clock()
    metrics = DaemonMetrics(monotonic=clock)
    server = HealthServer(
        metrics, "127.0.0.1", 0, lambda: metrics.healthy(interval_s=10, unhealthy_after_loops=3)
    )
    url = f"http://127.0.0.1:{server.port}"
    try:
        assert requests.get(f"{url}/healthz", timeout=5).status_code == 200  # just started
        clock.now = 31.0
        assert requests.get(f"{url}/healthz", timeout=5).status_code == 503  # no iteration for > 3 loops
        metrics.record(_result(3), duration_s=0.2)
        assert requests.get(f"{url}/healthz", timeout=5).status_code == 200
        assert requests.get(f"{url}/nope", timeout=5).status_code == 404
    finally:
        server.close()


def test_metrics_expose_decisions_capacity_forecast_and_loop_duration():
    metrics = DaemonMetrics()
    server = HealthServer(metrics, "127.0.0.1", 0, lambda: True)
    try:
        metrics.record(_result(3), duration_s=0.2)
        metrics.record(_result(2), duration_s=0.4)
        metrics.rescale_outcome("ready", 18.5)
        text = requests.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5).text
    finally:
        server.close()
    assert 'foresail_decisions_total{action="scale_out",rule="smallest-sufficient"} 1.0' in text
    assert 'foresail_decisions_total{action="hold",rule="smallest-sufficient"} 1.0' in text
    assert 'foresail_capacity_rps{scaleout="3",source="extrapolated"} 1800.0' in text
    assert "foresail_forecast_horizon_max_rps 1100.0" in text
    assert "foresail_loop_duration_seconds_count 2.0" in text
    assert "foresail_loop_duration_seconds_sum 0.6" in text
    assert 'foresail_rescale_outcomes_total{outcome="ready"} 1.0' in text
    assert "foresail_rescales_executed_total 1.0" in text


def test_readyz_waits_for_the_first_iteration_then_follows_the_loop():
    clock = Clock()
    metrics = DaemonMetrics(monotonic=clock)
    server = HealthServer(
        metrics,
        "127.0.0.1",
        0,
        lambda: metrics.healthy(interval_s=10, unhealthy_after_loops=3),
        lambda: metrics.ready(interval_s=10, unhealthy_after_loops=3),
    )
    url = f"http://127.0.0.1:{server.port}"
    try:
        assert requests.get(f"{url}/healthz", timeout=5).status_code == 200  # alive ...
        assert requests.get(f"{url}/readyz", timeout=5).status_code == 503  # ... not ready yet
        metrics.record(_result(2), duration_s=0.1)
        assert requests.get(f"{url}/readyz", timeout=5).status_code == 200
        clock.now = 31.0
        assert requests.get(f"{url}/readyz", timeout=5).status_code == 503  # the loop stalled
    finally:
        server.close()


def _server(host: str = "127.0.0.1") -> HealthServer:
    return HealthServer(DaemonMetrics(), host, 0, lambda: True)


def test_a_client_that_sends_a_byte_at_a_time_is_cut_off(monkeypatch):
    """Slow clients held their connections for good; a few hundred took every file descriptor."""
    import socket

    import daemon.health

    monkeypatch.setattr(daemon.health, "CLIENT_TIMEOUT_S", 0.3)
    server = _server()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as slow:
            slow.sendall(b"GET /healthz HTTP/1.1\r\nX-a: ")
            assert slow.recv(1024) == b""  # closed by the server, long before the client's 10 s
    finally:
        server.close()


def test_a_client_that_trickles_bytes_within_each_read_timeout_is_cut_off_at_the_deadline(monkeypatch):
    """The read timeout bounds each read only: a byte every 0.1 s held a slot for good, and 64 such clients
    kept every /healthz probe unanswered."""
    import socket

    import daemon.health

    monkeypatch.setattr(daemon.health, "CLIENT_TIMEOUT_S", 0.3)
    server = _server()
    closed_after = None
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=0.1) as slow:
            slow.sendall(b"GET /healthz HTTP/1.1\r\nX-a: ")
            for sent in range(1, 100):
                try:
                    slow.sendall(b"x")
                    if slow.recv(1024) == b"":
                        closed_after = sent
                        break
                except TimeoutError:  # nothing within 0.1 s: the server still holds the connection
                    continue
                except ConnectionError:
                    closed_after = sent
                    break
    finally:
        server.close()
    assert closed_after is not None and closed_after < 50


def test_connections_beyond_the_cap_are_closed_and_the_endpoint_serves_again_once_they_go(monkeypatch):
    import socket

    import daemon.health

    monkeypatch.setattr(daemon.health, "MAX_CLIENTS", 2)
    monkeypatch.setattr(daemon.health, "CLIENT_TIMEOUT_S", 1.0)
    server = _server()
    try:
        idle = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(2)]
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as third:
            third.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
            assert third.recv(1024) == b""  # refused: the two idle ones hold every slot
        for connection in idle:  # cut off by the server's timeout: their slots are free once they see it
            assert connection.recv(1024) == b""
            connection.close()
        assert requests.get(f"http://127.0.0.1:{server.port}/healthz", timeout=10).status_code == 200
    finally:
        server.close()


def test_a_client_that_hangs_up_leaves_no_traceback(capsys):
    """Each reset connection printed a 1.5 KB traceback into the container's log."""
    server = _server()
    try:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except ConnectionResetError:
            server.server.handle_error(None, ("127.0.0.1", 1))
        assert capsys.readouterr().err == ""
    finally:
        server.close()


def test_an_ipv6_host_is_served():
    server = _server("::1")
    try:
        assert requests.get(f"http://[::1]:{server.port}/healthz", timeout=5).status_code == 200
    finally:
        server.close()
