"""Retries with exponential backoff and jitter, for calls to the Kubernetes API.

Only conflicts (409: someone changed the object between our read and write) and server-side failures
(5xx, a dropped connection) are retried; a 4xx such as 403 or 404 is a configuration problem that waiting
does not fix, so it surfaces at once. A call still failing after its last retry fails the iteration with
`RetriesExhausted` (the loop holds and tries again next iteration). Every back-off waits on one process-wide
stop flag: once the daemon is asked to stop (SIGTERM), a waiting retry gives up at once with `Interrupted`,
so an iteration in the middle of retries ends within a second.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException

T = TypeVar("T")

_stopping = threading.Event()


class RetriesExhausted(RuntimeError):
    """A call still failed after its last retry (the cause is the last error)."""


class Interrupted(RuntimeError):
    """The daemon is stopping: a retry or a wait was abandoned instead of waited out."""


def stop_waiting() -> None:
    """The daemon is stopping: every back-off and bounded wait gives up at once."""
    _stopping.set()


def allow_waiting() -> None:
    """A daemon (re)starts in this process: back-offs wait again."""
    _stopping.clear()


def stopping() -> bool:
    return _stopping.is_set()


def wait_s(seconds: float) -> None:
    """Sleep `seconds` unless the daemon is asked to stop, then raise `Interrupted` at once."""
    if _stopping.wait(max(seconds, 0.0)):
        raise Interrupted("the daemon is stopping")


def is_retryable(error: BaseException) -> bool:
    if isinstance(error, ApiException):
        # 409: a conflict to read again; 429: the API server's throttling (priority and fairness)
        return error.status in (409, 429) or (error.status or 0) >= 500
    return isinstance(error, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


def with_retries(
    call: Callable[[], T],
    retries: int,
    backoff_s: float,
    on_retry: Callable[[int, BaseException, float], None] | None = None,
    sleep: Callable[[float], None] = wait_s,
    jitter: Callable[[], float] = random.random,
) -> T:
    """`call()`, retried up to `retries` times on retryable errors; delay doubles from `backoff_s` (±50%).

    A non-retryable error surfaces as it is; the last retryable one as `RetriesExhausted`.
    """
    attempt = 0
    while True:
        try:
            return call()
        except Exception as error:
            if not is_retryable(error):
                raise
            if attempt >= retries:
                raise RetriesExhausted(
                    f"gave up after {retries + 1} attempts: {type(error).__name__}: {_short(error)}"
                ) from error
            delay = backoff_s * 2**attempt * (0.5 + jitter())
            attempt += 1
            if on_retry is not None:
                on_retry(attempt, error, delay)
            sleep(delay)


def _short(error: BaseException) -> str:
    status = getattr(error, "status", None)
    if status is not None:
        return f"{status} {getattr(error, 'reason', '') or ''}".strip()
    return str(error).splitlines()[0] if str(error) else ""


def described(error: BaseException, limit: int = 300) -> str:
    """`Type: first line of the message`, at most `limit` characters: one log line, whatever the library
    packed into its message (pydantic and the Kubernetes client's exceptions run over many lines)."""
    text = f"{type(error).__name__}: {_short(error)}"
    return text if len(text) <= limit else text[: limit - 3] + "..."
