"""The final save at shutdown: when the disk refuses it (full, a file-size limit, read-only), one line says
what is not stored and the daemon exits non-zero, without a traceback and without holding the store."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import structlog

from daemon.lifecycle import load_knowledge, open_store, save_and_close
from mape.knowledge import KnowledgeSettings
from mape.knowledge_store import KnowledgeStore
from tests.conftest import REPO
from tests.daemon.test_lifecycle_start import _saved, read_only


def test_a_final_save_the_disk_refuses_is_one_line_and_the_store_is_released(tmp_path, capsys):
    path = tmp_path / "store" / "k.sqlite"
    _saved(path, 3)
    store = open_store(path)
    knowledge = load_knowledge(store, KnowledgeSettings())
    knowledge.iteration = 4
    with read_only(path.parent):  # the snapshot beside the store cannot be written
        assert save_and_close(structlog.get_logger(), store, knowledge, 1) is False
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"foresail: the final save to the knowledge store {path} failed"
    )
    assert "the iterations since its last successful save are not stored" in lines[0]
    KnowledgeStore(path).close()  # not StoreBusy: the lock went with the failed save


def test_a_final_save_that_succeeds_says_nothing(tmp_path, capsys):
    path = tmp_path / "k.sqlite"
    _saved(path, 3)
    store = open_store(path)
    knowledge = load_knowledge(store, KnowledgeSettings())
    knowledge.iteration = 4
    assert save_and_close(structlog.get_logger(), store, knowledge, 1) is True
    assert capsys.readouterr().err == ""
    store = KnowledgeStore(path)
    assert store.load().iteration == 4
    store.close()


def _file_size_limit() -> None:
    limit = 110_000  # bytes: room to open the store, not to save an iteration (the forecaster, the twin)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_run_whose_store_outgrows_a_file_size_limit_exits_1_without_a_traceback(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "run", "--knowledge", str(tmp_path / "k.sqlite"),
         "--iterations", "2", "--audit-log", "-"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, preexec_fn=_file_size_limit,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "cannot start" not in done.stderr
    assert "foresail: the final save to the knowledge store" in done.stderr
