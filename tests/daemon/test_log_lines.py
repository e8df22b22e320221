"""A log or audit line that cannot be written (a full disk) is dropped; the loop goes on."""

from __future__ import annotations

import errno

import structlog

from daemon.logs import configure_logging


class FullDisk:
    def __init__(self) -> None:
        self.full = True
        self.lines: list[str] = []

    def write(self, text: str) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.lines.append(text)
        return len(text)

    def flush(self) -> None:
        return None


def test_lines_that_cannot_be_written_are_dropped_and_said_once(capsys):
    disk = FullDisk()
    configure_logging("info", "json", disk)
    log = structlog.get_logger("foresail.audit")
    for iteration in range(3):
        log.info("iteration", iteration=iteration)
    assert capsys.readouterr().err.count("log lines dropped (OSError") == 1
    disk.full = False
    log.info("iteration", iteration=3)
    assert len(disk.lines) == 1 and '"iteration": 3' in disk.lines[0]
