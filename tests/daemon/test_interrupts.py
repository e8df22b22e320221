"""Ctrl-C of the offline commands (`daemon/cli.main` runs each inside `interruptible`)."""

from __future__ import annotations

import signal
import sys
import threading

import pytest

from daemon.interrupts import deferred_in_finalizers, interruptible


@pytest.fixture(autouse=True)
def _default_sigint():
    """Python's own SIGINT handler, as in a command started from a terminal: a test session started in
    the background by a shell (CI's runner) inherits SIGINT ignored, where `interruptible` changes nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


class _RaisesInFinalizer:
    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)  # the handler runs here, inside the finalizer


def _run_on(delivered: threading.Event) -> None:
    """A command's work after the finalizer: it waits for the interrupt that must reach it."""
    _RaisesInFinalizer()  # collected at once
    delivered.wait(timeout=5)


def test_a_ctrl_c_that_lands_in_a_finalizer_still_interrupts_the_command():
    """By default Python prints a KeyboardInterrupt raised in `__del__` as "Exception ignored" and the
    command runs on."""
    with pytest.raises(KeyboardInterrupt), interruptible():
        _run_on(threading.Event())


def test_the_previous_handler_is_back_afterwards():
    previous = signal.getsignal(signal.SIGINT)
    with interruptible():
        assert signal.getsignal(signal.SIGINT) is not previous
    assert signal.getsignal(signal.SIGINT) is previous


def test_outside_the_main_thread_nothing_changes():
    seen: list[object] = []

    def inside() -> None:
        with interruptible():
            seen.append(signal.getsignal(signal.SIGINT))

    before = signal.getsignal(signal.SIGINT)
    worker = threading.Thread(target=inside)
    worker.start()
    worker.join()
    assert seen == [before]


def test_an_ignored_sigint_stays_ignored():
    """A shell starts a background command with SIGINT ignored: a Ctrl-C for the foreground job killed it."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interruptible():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            signal.raise_signal(signal.SIGINT)  # nothing happens
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_signal_deferred_past_the_commands_end_is_not_sent():
    """Redelivered 50 ms later, a Ctrl-C from a finalizer that ran as the command ended raised a
    KeyboardInterrupt at the interpreter's exit."""
    active = False
    handler = deferred_in_finalizers(lambda *_: None, lambda: active)
    sent: list[int] = []
    original = signal.pthread_kill
    signal.pthread_kill = lambda _thread, signum: sent.append(signum)
    try:

        class Finalized:
            def __del__(self) -> None:
                handler(signal.SIGINT, sys._getframe())

        Finalized()
        for timer in [t for t in threading.enumerate() if isinstance(t, threading.Timer)]:
            timer.join()  # the redelivery has run
    finally:
        signal.pthread_kill = original
    assert sent == []
