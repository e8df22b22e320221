"""A server that sends its headers, then one byte at a time, never finishing its answer: `requests`' timeout
(and the Kubernetes client's) bounds each read, not the answer, and it held an iteration (and SIGTERM, which
waits for it) for good. A fake server: a real Prometheus, Flink or API server cannot be made to drip."""

from __future__ import annotations

import gzip
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import requests
import urllib3

from backends.bounded_http import BoundedPoolManager, BoundedSession, _Watchdog, pool_classes
from backends.flinkrest import FlinkRest
from backends.kubernetes import DeploymentScale, api_client
from backends.prometheus import PrometheusClient
from config.backends import KubernetesConfig, PrometheusConfig
from tests.backends.fake_http import raw_server, self_signed_cert, send_headers, within


def _dripping(head: Callable[[BaseHTTPRequestHandler], None], first: bytes, chunk: bytes) -> Iterator[str]:
    """A server that sends `head`, then `first`, then `chunk` every 50 ms (well inside each read's
    timeout) until the test ends or the client gives up."""

    def drip(handler: BaseHTTPRequestHandler) -> None:
        head(handler)
        try:
            handler.wfile.write(first)
            while not stopped.is_set():
                handler.wfile.write(chunk)
                handler.wfile.flush()
                stopped.wait(0.05)
        except OSError:  # the client gave up
            pass

    stopped = threading.Event()
    with raw_server(drip) as url:
        yield url
        stopped.set()


@pytest.fixture
def dripping_url():
    yield from _dripping(lambda handler: send_headers(handler, 1000000), b"", b" ")  # whitespace: valid JSON


def test_a_dripping_flink_rest_api_is_not_known_to_run(dripping_url):
    assert within(20, lambda: FlinkRest(dripping_url, timeout_s=0.5).job_status()) is None


def test_a_dripping_prometheus_times_out(dripping_url):
    client = PrometheusClient(PrometheusConfig(url=dripping_url, timeout_s=0.5, retries=0))

    def query() -> str:
        try:
            client.instant("up", time.time())
        except requests.Timeout as error:
            return str(error)
        return "answered"

    assert "the answer took over 1.5 s" in within(20, query)


def _api_at(url: str, tmp_path, ca: Path | None = None) -> object:
    kubeconfig = tmp_path / "kubeconfig"
    authority = f", certificate-authority: '{ca}'" if ca else ""
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: drip\n"
        f"clusters: [{{name: drip, cluster: {{server: '{url}'{authority}}}}}]\n"
        "users: [{name: drip, user: {token: t}}]\n"
        "contexts: [{name: drip, context: {cluster: drip, user: drip}}]\n"
    )
    return api_client(KubernetesConfig(kubeconfig=str(kubeconfig), namespace="flink", name="tm"))


@pytest.mark.parametrize("server", ["dripping_url", "gzip_dripping_url"])
def test_a_dripping_kubernetes_api_server_times_out(server, request, tmp_path):
    url = request.getfixturevalue(server)
    deployment = DeploymentScale(_api_at(url, tmp_path), "flink", "tm", timeout_s=0.5)

    def read() -> str:
        try:
            deployment.desired()
        except urllib3.exceptions.TimeoutError as error:
            return str(error)
        return "answered"

    assert "the answer took over 1.5 s" in within(20, read)


def _answer(body: bytes, encoding: str):
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Encoding", encoding)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return answer


@pytest.fixture
def gzip_dripping_url():
    """Empty stored deflate blocks decode to nothing: a read that decoded as it went waited for output
    past every deadline (urllib3's `read1` reads on until it has some)."""

    def head(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Encoding", "gzip")
        handler.end_headers()  # no length: the answer ends when the connection does

    # a gzip header, then empty stored blocks
    yield from _dripping(head, b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", b"\x00\x00\x00\xff\xff")


def test_a_gzip_answer_of_empty_blocks_times_out(gzip_dripping_url):
    assert within(20, lambda: FlinkRest(gzip_dripping_url, timeout_s=0.5).job_status()) is None


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "deflate-raw"])
def test_a_compressed_answer_is_read_whole(encoding):
    body = b'{"status": "success", "data": {"resultType": "vector", "result": []}}'
    wire = {
        "gzip": lambda: gzip.compress(body),
        "deflate": lambda: zlib.compress(body),
        "deflate-raw": lambda: zlib.compress(body, wbits=-15),
    }[encoding]()
    with raw_server(_answer(wire, encoding.removesuffix("-raw"))) as url:
        client = PrometheusClient(PrometheusConfig(url=url, timeout_s=2, retries=0))
        assert client.instant("up", time.time()) == []


def test_a_compressed_answer_over_the_size_cap_is_refused(monkeypatch):
    monkeypatch.setattr("backends.bounded_http.MAX_ANSWER_BYTES", 1000)
    with (
        raw_server(_answer(gzip.compress(b" " * 5000), "gzip")) as url,
        pytest.raises(requests.ConnectionError, match="exceeds 1000 bytes"),
    ):
        PrometheusClient(PrometheusConfig(url=url, timeout_s=2, retries=0)).instant("up", time.time())


def test_a_gzip_answer_of_several_members_is_read_whole_and_a_damaged_one_is_a_bad_answer():
    """zlib reads one gzip member: the second was dropped (the JSON cut in half). A damaged body was
    reported as Prometheus unreachable, and the reading's other queries were skipped."""
    halves = gzip.compress(b'{"status": "success", ') + gzip.compress(
        b'"data": {"resultType": "vector", "result": []}}'
    )
    with raw_server(_answer(halves, "gzip")) as url:
        assert PrometheusClient(PrometheusConfig(url=url, timeout_s=2, retries=0)).instant("up", 0.0) == []
    with (
        raw_server(_answer(b"\x1f\x8b\x08\x00 not gzip at all", "gzip")) as url,
        pytest.raises(requests.exceptions.ContentDecodingError, match="a damaged gzip answer") as raised,
    ):
        BoundedSession().get(url, timeout=2)
    assert not isinstance(raised.value, requests.ConnectionError)  # not "unreachable"


@contextmanager
def _dripping_headers(tls: tuple[Path, Path] | None = None) -> Iterator[str]:
    """A server that sends its status line, then one header's value a byte every 50 ms: `http.client`
    reads a header line of up to 64 KiB, so the headers alone took the best part of an hour."""

    def drip(handler: BaseHTTPRequestHandler) -> None:
        try:
            handler.wfile.write(b"HTTP/1.1 200 OK\r\nX-Drip: ")
            while not stopped.is_set():
                handler.wfile.write(b"a")
                handler.wfile.flush()
                stopped.wait(0.05)
        except OSError:  # the client gave up
            pass

    stopped = threading.Event()
    with raw_server(drip, tls) as url:
        yield url
        stopped.set()


def test_dripping_headers_bound_flink_rest_and_prometheus():
    with _dripping_headers() as url:
        assert within(20, lambda: FlinkRest(url, timeout_s=0.5).job_status()) is None
        client = PrometheusClient(PrometheusConfig(url=url, timeout_s=0.5, retries=0))

        def query() -> str:
            try:
                client.instant("up", time.time())
            except requests.RequestException as error:  # through its retry: a ConnectionError
                return str(error)
            return "answered"

        assert "Read timed out" in within(20, query)


def test_dripping_headers_over_tls_bound_the_kubernetes_client(tmp_path):
    """The API server is HTTPS: the watchdog cuts a TLS socket as well."""
    cert, key = self_signed_cert(tmp_path)
    with _dripping_headers((cert, key)) as url:
        deployment = DeploymentScale(_api_at(url, tmp_path, ca=cert), "flink", "tm", timeout_s=0.5)

        def read() -> str:
            try:
                deployment.desired()
            except urllib3.exceptions.HTTPError as error:  # urllib3 wraps the read timeout: MaxRetryError
                return str(error)
            return "answered"

        assert "Read timed out" in within(20, read)


def test_headers_in_time_leave_the_connection_to_be_reused():
    """The watchdog of an answer that came in time is called off: the pooled connection serves the next
    requests (one client port for all), and no watchdog is left running."""
    ports: list[int] = []

    def answer(handler: BaseHTTPRequestHandler) -> None:
        ports.append(handler.client_address[1])
        handler.protocol_version, handler.close_connection = "HTTP/1.1", False  # keep-alive
        _answer(b"{}", "identity")(handler)

    with raw_server(answer) as url:
        session = BoundedSession()
        assert [session.get(url, timeout=5).content for _ in range(3)] == [b"{}"] * 3
    assert len(set(ports)) == 1
    for timer in [t for t in threading.enumerate() if isinstance(t, threading.Timer)]:
        timer.join(1)
        assert not timer.is_alive(), "a watchdog outlived its answer"


def test_the_watchdog_cuts_the_socket_under_a_tls_transport():
    """TLS through an HTTPS proxy reads through urllib3's SSLTransport, which has no shutdown(): the
    timer thread died with an AttributeError and the dripping headers ran on. The socket under it is cut."""
    inner, peer = socket.socketpair()

    class Transport:  # like urllib3.util.ssltransport.SSLTransport: the socket it wraps, no shutdown()
        socket = inner

    with _Watchdog(Transport(), 0.2) as watchdog:  # type: ignore[arg-type]
        assert within(10, lambda: inner.recv(1)) == b""  # woken by the cut, not by the peer
    assert watchdog.cut
    peer.close()
    inner.close()


def test_a_socks_proxy_keeps_its_own_pools():
    """The Kubernetes client builds a SOCKSProxyManager for a `socks5://` proxy-url: given our pools, its
    connections would have gone direct. Only a plain or HTTP proxy manager gets them."""

    class OtherManager(urllib3.PoolManager):  # stands in for urllib3.contrib.socks (PySocks not installed)
        pass

    plain, other = urllib3.PoolManager(), OtherManager()
    BoundedPoolManager(plain), BoundedPoolManager(other)
    assert plain.pool_classes_by_scheme == pool_classes()
    assert other.pool_classes_by_scheme["https"] is urllib3.HTTPSConnectionPool
