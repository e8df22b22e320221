"""Signals that stop a command, delivered where they cannot be lost.

Python raises a signal handler's exception in whatever frame is running. Raised inside a `__del__` it is
printed as "Exception ignored" and dropped, and the command goes on (CI: `Popen.__del__` swallowed a
Ctrl-C of `plan-capacity`, which then ran on with its signals ignored). A handler that finds itself in a
finalizer sends the signal again a moment later instead, once the finalizer is done.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

REDELIVER_S = 0.05
"""A signal that lands in a finalizer is sent again this much later."""

Handler = Callable[[int, FrameType | None], object]


def deferred_in_finalizers(handler: Handler, wanted: Callable[[], bool] = lambda: True) -> Handler:
    """`handler`, except that a signal landing in a `__del__` is sent again `REDELIVER_S` later (while
    `wanted()`: not after the command it was meant for has ended)."""

    def redeliver(signum: int) -> None:
        if wanted():
            signal.pthread_kill(threading.main_thread().ident, signum)

    def handle(signum: int, frame: FrameType | None) -> object:
        if _in_finalizer(frame):
            timer = threading.Timer(REDELIVER_S, redeliver, (signum,))
            timer.daemon = True
            timer.start()
            return None
        return handler(signum, frame)

    return handle


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt as by default, but never inside a finalizer; the previous handler
    is back afterwards. Only where Python's default handler is set, in the main thread: an ignored SIGINT
    (a command started in the background by a shell) stays ignored."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    active = True
    previous = signal.signal(
        signal.SIGINT, deferred_in_finalizers(signal.default_int_handler, lambda: active)
    )
    try:
        yield
    finally:
        active = False
        signal.signal(signal.SIGINT, previous)


def _in_finalizer(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False
