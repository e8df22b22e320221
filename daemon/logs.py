"""Logging set-up: structlog events as JSON lines (the audit trail) or readable console lines."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(
    level: str = "info", fmt: str = "json", stream: TextIO | None = None, names: dict[str, str] | None = None
) -> None:
    """Route every structlog event to `stream` (stdout by default) with a UTC timestamp; `names` (the job
    and the target of this daemon) go into every event, from every thread."""
    renderers = (
        [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer(sort_keys=False)]
        if fmt == "json"
        else [structlog.dev.ConsoleRenderer(colors=False)]
    )
    structlog.configure(
        processors=[
            _named(names or {}),
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *renderers,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stdout),
        cache_logger_on_first_use=False,
    )


def _named(names: dict[str, str]) -> structlog.typing.Processor:
    def add(_logger: object, _method: str, event: dict) -> dict:
        for key, value in names.items():
            event.setdefault(key, value)
        return event

    return add
