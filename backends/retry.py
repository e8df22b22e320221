"""Retries with exponential backoff and jitter, for calls to the Kubernetes API.

Only conflicts (409: someone changed the object between our read and write) and server-side failures
(5xx, a dropped connection) are retried; a 4xx such as 403 or 404 is a configuration problem that waiting
does not fix, so it surfaces at once.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException

T = TypeVar("T")


def is_retryable(error: BaseException) -> bool:
    if isinstance(error, ApiException):
        return error.status == 409 or (error.status or 0) >= 500
    return isinstance(error, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


def with_retries(
    call: Callable[[], T],
    retries: int,
    backoff_s: float,
    on_retry: Callable[[int, BaseException, float], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    jitter: Callable[[], float] = random.random,
) -> T:
    """`call()`, retried up to `retries` times on retryable errors; delay doubles from `backoff_s` (±50%)."""
    attempt = 0
    while True:
        try:
            return call()
        except Exception as error:
            if attempt >= retries or not is_retryable(error):
                raise
            delay = backoff_s * 2**attempt * (0.5 + jitter())
            attempt += 1
            if on_retry is not None:
                on_retry(attempt, error, delay)
            sleep(delay)
