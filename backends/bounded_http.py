"""HTTP requests whose whole answer is bounded in time and size.

`requests`' timeout bounds each socket read, not the answer: a server that sends its headers, then a byte
every half second, held a loop iteration for good (and SIGTERM with it, which waits for the iteration).
Here the body is read in chunks against a deadline and a size cap; exceeding either raises
`requests.Timeout` / `requests.ConnectionError`, which the callers already name and hold on. The Kubernetes
client's `_request_timeout` is per read too (urllib3's `total` bounds the connect and each read): its pool
manager is wrapped the same way (`BoundedPoolManager`), raising urllib3's timeout, which the retry layer
counts as transient. The status line and headers come before any of that, read by `http.client` line by
line: a server that drips them is bounded by a watchdog that cuts the connection's socket once they
have taken `ANSWER_DEADLINE_READS` read timeouts (`pool_classes`, installed in both clients' pools).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import requests
import urllib3

ANSWER_DEADLINE_READS = 3
"""The whole answer may take this many read timeouts: a large range answer still arrives on a slow link."""
MAX_ANSWER_BYTES = 256 * 1024 * 1024
"""Larger than any answer the loop asks for (30,000 worker series of a window are ~20 MB)."""


class _HeadersInTime:
    """An urllib3 connection whose status line and headers arrive within `ANSWER_DEADLINE_READS` × its
    read timeout (`timeout`, which the pool sets before reading them), or whose socket is cut. A cut
    raises a read timeout, which both clients already name and hold on, also where `http.client` read
    the cut as the end of the headers and had an empty answer."""

    timeout: object
    sock: socket.socket | None

    def getresponse(self):  # type: ignore[no-untyped-def]
        read_s = self.timeout
        if not isinstance(read_s, int | float) or not read_s > 0 or self.sock is None:
            return super().getresponse()  # type: ignore[misc]
        limit_s = ANSWER_DEADLINE_READS * read_s
        too_slow = f"the answer's headers took over {limit_s:g} s"
        with _Watchdog(self.sock, limit_s) as watchdog:
            try:
                response = super().getresponse()  # type: ignore[misc]
            except Exception as error:
                if watchdog.cut:
                    raise TimeoutError(too_slow) from error
                raise
        if watchdog.cut:
            response.close()
            raise TimeoutError(too_slow)
        return response


class _Watchdog:
    """Shuts a socket down (waking the read blocked on it) unless left within `limit_s`; `cut` says
    whether it did. Left and cut are decided under one lock: a cut never lands after the exit."""

    def __init__(self, sock: socket.socket, limit_s: float) -> None:
        self._sock = sock
        self._lock = threading.Lock()
        self._left = False
        self.cut = False
        self._timer = threading.Timer(limit_s, self._cut_off)
        self._timer.daemon = True

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._left = True
        self._timer.cancel()

    def _cut_off(self) -> None:
        with self._lock:
            if self._left:
                return
            self.cut = True
            sock = self._sock
            while not isinstance(sock, socket.socket) and hasattr(sock, "socket"):
                sock = sock.socket  # TLS through an HTTPS proxy: urllib3's SSLTransport has no shutdown
            with contextlib.suppress(Exception):  # already closed; a timer thread must not die loud
                sock.shutdown(socket.SHUT_RDWR)


class _HTTPConnection(_HeadersInTime, urllib3.connection.HTTPConnection):
    pass


class _HTTPSConnection(_HeadersInTime, urllib3.connection.HTTPSConnection):
    pass


class _HTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


def pool_classes() -> dict[str, type[urllib3.HTTPConnectionPool]]:
    """urllib3's pools per scheme, with connections whose headers are read within the deadline."""
    return {"http": _HTTPPool, "https": _HTTPSPool}


def _bound(manager: urllib3.PoolManager) -> urllib3.PoolManager:
    """The manager with those pools: a plain or HTTP(S)-proxy one (a SOCKS proxy's keeps its own pools,
    which connect through the proxy)."""
    if type(manager) is urllib3.PoolManager or isinstance(manager, urllib3.ProxyManager):
        manager.pool_classes_by_scheme = pool_classes()
    return manager


class _Adapter(requests.adapters.HTTPAdapter):
    """`requests`' adapter with those pools, also through a proxy."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        _bound(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **kwargs: Any) -> urllib3.PoolManager:
        return _bound(super().proxy_manager_for(proxy, **kwargs))


class BoundedSession(requests.Session):
    """A session whose requests read their body within `ANSWER_DEADLINE_READS` × the read timeout.

    The body is read as it came over the wire and decompressed afterwards: decoding while reading let a
    gzip stream of empty blocks, which decode to nothing, keep one read going past every deadline."""

    def __init__(self) -> None:
        super().__init__()
        self.headers["Accept-Encoding"] = "gzip, deflate"  # what `_decoded` can bound

    def mount(self, prefix: str, adapter: requests.adapters.BaseAdapter) -> None:
        """A plain adapter mounted (the session's own defaults, prometheus-api-client's for its retries)
        gets our pools."""
        if type(adapter) is requests.adapters.HTTPAdapter:
            adapter = _Adapter(
                pool_connections=adapter._pool_connections,  # type: ignore[attr-defined]
                pool_maxsize=adapter._pool_maxsize,  # type: ignore[attr-defined]
                max_retries=adapter.max_retries,
                pool_block=adapter._pool_block,  # type: ignore[attr-defined]
            )
        super().mount(prefix, adapter)

    def request(self, method: str, url: str, *args, **kwargs) -> requests.Response:  # type: ignore[override]
        read_s = _seconds(kwargs.get("timeout"))
        if read_s is None:
            return super().request(method, url, *args, **kwargs)
        response = super().request(method, url, *args, **{**kwargs, "stream": True})
        try:
            wire = _read_whole(
                lambda size: response.raw.read1(size, decode_content=False),
                url,
                ANSWER_DEADLINE_READS * read_s,
                too_slow=requests.Timeout,
                too_large=requests.ConnectionError,
            )
        except urllib3.exceptions.HTTPError as error:  # what `requests` would have wrapped reading it
            raise _as_requests_error(error, url) from error
        finally:
            response.close()
        # what `response.content` would have read, read under the deadline (a damaged body is a bad
        # answer, not a lost connection: the other queries of the reading still run)
        response._content = _decoded(
            wire,
            response.headers.get("Content-Encoding", ""),
            url,
            too_large=requests.ConnectionError,
            undecodable=requests.exceptions.ContentDecodingError,
        )
        return response


class BoundedPoolManager:
    """A urllib3 pool manager (the Kubernetes client's) whose answers are read whole within
    `ANSWER_DEADLINE_READS` × the request's timeout and under `MAX_ANSWER_BYTES`; the rest is the wrapped
    manager's."""

    def __init__(self, inner: urllib3.PoolManager) -> None:
        self._inner = _bound(inner)

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> urllib3.BaseHTTPResponse:
        response = self._inner.request(method, url, *args, **kwargs)
        read_s = _seconds(kwargs.get("timeout"))
        if read_s is None:
            return response
        try:
            wire = _read_whole(
                lambda size: response.read1(size, decode_content=False),
                url,
                ANSWER_DEADLINE_READS * read_s,
                too_slow=urllib3.exceptions.TimeoutError,
                too_large=urllib3.exceptions.ProtocolError,
            )
            body = _decoded(
                wire,
                response.headers.get("Content-Encoding", ""),
                url,
                too_large=urllib3.exceptions.ProtocolError,
                undecodable=urllib3.exceptions.DecodeError,
            )
        except BaseException:
            response.release_conn()
            raise
        response._body = body  # what `response.data` would have read, read under the deadline
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _read_whole(
    read1: Callable[[int], bytes],
    url: str,
    limit_s: float,
    too_slow: type[Exception],
    too_large: type[Exception],
) -> bytes:
    """The answer's body, chunk by chunk as it arrives (`read1`: what has arrived, not a full chunk),
    raising `too_slow` past `limit_s` and `too_large` past `MAX_ANSWER_BYTES`."""
    deadline = time.monotonic() + limit_s
    body = bytearray()
    while chunk := read1(64 * 1024):
        body += chunk
        if time.monotonic() > deadline:
            raise too_slow(f"{url}: the answer took over {limit_s:g} s")
        if len(body) > MAX_ANSWER_BYTES:
            raise too_large(f"{url}: the answer exceeds {MAX_ANSWER_BYTES} bytes")
    return bytes(body)


def _decoded(
    wire: bytes, encoding: str, url: str, too_large: type[Exception], undecodable: type[Exception]
) -> bytes:
    """The body under its Content-Encoding (none, gzip or deflate), at most `MAX_ANSWER_BYTES` of it."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return wire
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise undecodable(f"{url}: an answer in {encoding!r}, not asked for")
    zlib_wrapped = len(wire) >= 2 and wire[0] & 0x0F == 8 and (wire[0] << 8 | wire[1]) % 31 == 0
    wbits = 31 if encoding != "deflate" else 15 if zlib_wrapped else -15  # deflate: zlib data, or bare
    body, rest = bytearray(), wire
    while rest:  # gzip may hold several members, one after the other
        decompressor = zlib.decompressobj(wbits)
        try:
            body += decompressor.decompress(rest, MAX_ANSWER_BYTES + 1 - len(body))
        except zlib.error as error:
            if rest is not wire:  # bytes after a whole member that start none: ignored, as urllib3 does
                break
            raise undecodable(f"{url}: a damaged {encoding} answer") from error
        if len(body) > MAX_ANSWER_BYTES or decompressor.unconsumed_tail:
            raise too_large(f"{url}: the answer exceeds {MAX_ANSWER_BYTES} bytes")
        if not decompressor.eof:
            raise undecodable(f"{url}: a {encoding} answer cut short")
        rest = decompressor.unused_data if wbits == 31 else b""
    return bytes(body)


def _as_requests_error(error: urllib3.exceptions.HTTPError, url: str) -> requests.RequestException:
    """A body read's urllib3 error (cut short, stalled, badly encoded) as the `requests` error callers catch."""
    text = f"{url}: {type(error).__name__} reading the answer"
    if isinstance(error, urllib3.exceptions.TimeoutError):
        return requests.Timeout(text)
    if isinstance(error, urllib3.exceptions.DecodeError):
        return requests.exceptions.ContentDecodingError(text)
    return requests.ConnectionError(text)


def _seconds(timeout: object) -> float | None:
    """The request's read timeout in seconds: a number, the read part of `requests`' (connect, read) pair,
    or urllib3's Timeout(total=…) the Kubernetes client makes of a number; None when it has none."""
    if isinstance(timeout, tuple):
        timeout = timeout[1]
    if isinstance(timeout, urllib3.Timeout):
        timeout = timeout.total
    return float(timeout) if isinstance(timeout, int | float) else None
