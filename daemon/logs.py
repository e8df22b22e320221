"""Logging set-up: structlog events as JSON lines (the audit trail) or readable console lines."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
from typing import TextIO

import structlog

from daemon.finite_json import finite

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(
    level: str = "info", fmt: str = "json", stream: TextIO | None = None, names: dict[str, str] | None = None
) -> None:
    """Route every structlog event to `stream` (stdout by default) with a UTC timestamp; `names` (the job
    and the target of this daemon) go into every event, from every thread."""
    renderers = (
        [
            structlog.processors.dict_tracebacks,
            structlog.processors.JSONRenderer(_strict_json, sort_keys=False),
        ]
        if fmt == "json"
        else [structlog.dev.ConsoleRenderer(colors=False)]
    )
    writer = _LineWriter(stream or sys.stdout)
    structlog.configure(
        processors=[
            _named(names or {}),
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *renderers,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        logger_factory=lambda *_: writer,
        cache_logger_on_first_use=False,
    )


def _strict_json(event: object, **options: object) -> str:
    """JSON a strict parser reads: null where a value is NaN or infinite (json.dumps writes `Infinity`)."""
    return json.dumps(finite(event), allow_nan=False, **options)


def _named(names: dict[str, str]) -> structlog.typing.Processor:
    def add(_logger: object, _method: str, event: dict) -> dict:
        for key, value in names.items():
            event.setdefault(key, value)
        return event

    return add


class _LineWriter:
    """structlog's PrintLogger, except that a line that cannot be written (a full disk, a closed pipe) is
    dropped and said once on stderr: a log line must never stop the loop."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._failing = False
        self._lock = threading.Lock()  # the loop, the surge watch and the lease thread log at once

    def msg(self, message: str) -> None:
        try:
            with self._lock:
                self._stream.write(message + "\n")
                self._stream.flush()
            self._failing = False
        except (OSError, ValueError) as error:  # ValueError: a closed file
            if not self._failing:
                self._failing = True
                with contextlib.suppress(OSError, ValueError):
                    print(f"foresail: log lines dropped ({type(error).__name__}: {error})", file=sys.stderr)

    debug = info = warning = warn = error = critical = exception = fatal = failure = err = log = msg
