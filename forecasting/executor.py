"""An executor that runs each task at once, on the caller's thread."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any


class InlineExecutor(Executor):
    """Runs a submitted call immediately and returns a done Future.

    For the simulator: forecast fits and recovery watches then finish inside the loop's call, so a run is
    deterministic (same input, same output), at the price of the loop waiting for that work.
    """

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            future.set_exception(exc)
        else:
            future.set_result(result)
        return future
