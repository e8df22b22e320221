"""HTTP requests whose whole answer is bounded in time and size.

`requests`' timeout bounds each socket read, not the answer: a server that sends its headers, then a byte
every half second, held a loop iteration for good (and SIGTERM with it, which waits for the iteration).
Here the body is read in chunks against a deadline and a size cap; exceeding either raises
`requests.Timeout` / `requests.ConnectionError`, which the callers already name and hold on. A server that
drips its headers is still bounded only per read.
"""

from __future__ import annotations

import time

import requests

ANSWER_DEADLINE_READS = 3
"""The whole answer may take this many read timeouts: a large range answer still arrives on a slow link."""
MAX_ANSWER_BYTES = 256 * 1024 * 1024
"""Larger than any answer the loop asks for (30,000 worker series of a window are ~20 MB)."""


class BoundedSession(requests.Session):
    """A session whose requests read their body within `ANSWER_DEADLINE_READS` × the read timeout."""

    def request(self, method: str, url: str, *args, **kwargs) -> requests.Response:  # type: ignore[override]
        timeout = kwargs.get("timeout")
        read_s = timeout[1] if isinstance(timeout, tuple) else timeout
        if read_s is None:
            return super().request(method, url, *args, **kwargs)
        deadline = time.monotonic() + ANSWER_DEADLINE_READS * float(read_s)
        response = super().request(method, url, *args, **{**kwargs, "stream": True})
        body = bytearray()
        try:
            while chunk := response.raw.read1(64 * 1024, decode_content=True):  # what has arrived, not 64 KB
                body += chunk
                if time.monotonic() > deadline:
                    raise requests.Timeout(
                        f"{url}: the answer took over {ANSWER_DEADLINE_READS * float(read_s):g} s"
                    )
                if len(body) > MAX_ANSWER_BYTES:
                    raise requests.ConnectionError(f"{url}: the answer exceeds {MAX_ANSWER_BYTES} bytes")
        finally:
            response.close()
        response._content = bytes(body)  # what `response.content` would have read, read under the deadline
        return response
