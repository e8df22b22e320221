"""What every daemon run does at its start and its end, whichever backends it drives."""

from __future__ import annotations

import errno
import os
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from config.schema import Config
from mape.knowledge import Knowledge, KnowledgeSettings
from mape.knowledge_store import KnowledgeStore


class CannotStart(OSError):
    """A start-up step failed on the file system (a bad path, a read-only or full disk): one line, exit 2.
    An OSError, so what catches those around `open_store` (`foresail plan`) still does."""


@contextmanager
def starting() -> Iterator[None]:
    """Turn the OS errors of a start-up step (and a NUL byte in a path) into `CannotStart`. Only around
    start-up steps: an error inside the loop is a bug and keeps its traceback."""
    try:
        yield
    except OSError as error:
        raise CannotStart(f"{type(error).__name__}: {error}") from error
    except ValueError as error:
        if "embedded null" not in str(error):
            raise
        raise CannotStart(f"{type(error).__name__}: {error}") from error


def open_store(
    path: str | Path, decision_history: int = 10_000, fresh: bool = False, audit_file: TextIO | None = None
) -> KnowledgeStore:
    """The knowledge store. `fresh` empties it and `audit_file` once its lock is held: never what another
    daemon on the same store uses. A damaged one it had to move aside is also said on the console (the
    audit log may be a file nobody reads at the start). A store it cannot write is refused now, not after
    a run whose saves all fail."""
    with starting():
        _check_writable(str(path))
        store = KnowledgeStore(path, decision_history, fresh=fresh)
        if fresh and audit_file is not None:
            audit_file.truncate(0)
    if store.damaged:
        print(f"foresail: {store.damaged}", file=sys.stderr)
    return store


def _check_writable(path: str) -> None:
    """Refuse a store this process cannot write (a read-only file, folder or file system): every save of
    the run would fail, and SQLite would take the refused write for a damaged file."""
    if path == ":memory:":
        return
    for existing in (Path(path), Path(path).parent):
        if existing.exists() and not os.access(existing, os.W_OK):
            raise PermissionError(errno.EACCES, "the knowledge store cannot be written", str(existing))


def load_knowledge(store: KnowledgeStore, settings: KnowledgeSettings) -> Knowledge:
    """`store.load`, saying on the console what it found damaged (content unreadable: moved aside), as
    `open_store` does for damage found at open."""
    seen = store.damaged
    with starting():
        knowledge = store.load(settings)
    if store.damaged != seen:
        print(f"foresail: {store.damaged}", file=sys.stderr)
    if store.unreadable_parts:
        parts = ", ".join(store.unreadable_parts)
        print(
            f"foresail: knowledge store {store.path}: unreadable {parts} started fresh, the rest kept",
            file=sys.stderr,
        )
    return knowledge


def log_started(log: object, config: Config, knowledge: Knowledge, **details: object) -> None:
    """The 'daemon-started' event: what runs, and from which iteration it resumes."""
    log.info(
        "daemon-started",
        target_kind=config.target.kind,
        policy=config.scaling.policy,
        knowledge=config.knowledge.path,
        resumed_iteration=knowledge.iteration,
        **details,
    )


def save_and_close(log: object, store: KnowledgeStore, knowledge: Knowledge, iterations: int) -> bool:
    """Stop background work, persist the knowledge a last time, close the store, log 'daemon-stopped'.
    False when the save failed (a full disk, a file-size limit, a read-only or locked file): said in one
    line on stderr, and the caller exits non-zero."""
    knowledge.close()
    try:
        store.save(knowledge, None)
        saved = True
    except (OSError, sqlite3.Error) as error:
        print(
            f"foresail: the final save to the knowledge store {store.path} failed ({type(error).__name__}: "
            f"{error}): the iterations since its last successful save are not stored",
            file=sys.stderr,
        )
        saved = False
    finally:
        store.close()
    log.info("daemon-stopped", iterations=iterations, knowledge_iteration=knowledge.iteration, saved=saved)
    return saved


def audit_names(config: Config) -> dict[str, str]:
    """The job and the target every audit event names (several daemons log into one place)."""
    kind = config.target.kind
    if kind == "prometheus+kubernetes":
        k8s = config.kubernetes
        target = f"{k8s.resource}/{k8s.namespace}/{k8s.name}"
        default_job = k8s.name
    elif kind == "prometheus+local-flink":
        target, default_job = f"local-flink/{config.local_flink.rest_url}", "local-flink"
    else:
        target, default_job = "twin", str(config.twin.workload)
    return {"job": getattr(config.forecast, "registry_job", None) or default_job, "target": target}
