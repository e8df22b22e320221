"""A misbehaving HTTP server on 127.0.0.1 for the fault tests: garbage, errors, slowness, auth, TLS.

A real Prometheus cannot be made to answer garbage or hang; this stands in for it in exactly those tests.
"""

from __future__ import annotations

import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

Reply = Callable[[BaseHTTPRequestHandler], tuple[int, bytes]]


class FakeServer:
    def __init__(self, reply: Reply, tls: tuple[Path, Path] | None = None) -> None:
        self.requests: list[dict] = []
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append({"path": self.path, "headers": dict(self.headers)})
                self._answer()

            def do_PUT(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.body = self.rfile.read(length)
                outer.requests.append(
                    {"method": "PUT", "path": self.path, "headers": dict(self.headers), "body": self.body}
                )
                self._answer()

            def _answer(self) -> None:
                status, body = reply(self)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"{_serve_tls(self.server, tls)}://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def raw_server(
    answer: Callable[[BaseHTTPRequestHandler], None], tls: tuple[Path, Path] | None = None
) -> Iterator[str]:
    """The URL of a server on 127.0.0.1 whose every request (GET, PUT, PATCH) `answer` writes by hand:
    headers that promise more than comes, a body cut short or dripping, a status with any body. With
    `tls` (certificate, key), over HTTPS."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answer(self)

        do_PUT = do_PATCH = do_GET

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    scheme = _serve_tls(server, tls)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def _serve_tls(server: ThreadingHTTPServer, tls: tuple[Path, Path] | None) -> str:
    """The server's scheme: with `tls` (certificate, key) its socket is wrapped for HTTPS."""
    if tls is None:
        return "http"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(tls[0]), str(tls[1]))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return "https"


def send_headers(handler: BaseHTTPRequestHandler, content_length: int) -> None:
    """A 200 JSON answer's status and headers, announcing `content_length` bytes (what follows may differ)."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(content_length))
    handler.end_headers()


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 made with openssl (the CA file is the certificate itself)."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def within(seconds: float, call) -> object:
    """The call's result, or a failure if it has not returned after `seconds` (it used to never return)."""
    result: list = []
    worker = threading.Thread(target=lambda: result.append(call()), daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still reading after {time.monotonic() - started:.0f} s"
    return result[0]
