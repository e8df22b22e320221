"""Ctrl-C of the offline commands (`daemon/cli.main` runs each inside `interruptible`)."""

from __future__ import annotations

import signal
import threading

import pytest

from daemon.interrupts import interruptible


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
