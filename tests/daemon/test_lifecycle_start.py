"""The daemon's start: `--fresh` never wipes a store another daemon holds, damage found while loading is said
on the console, and a path the file system refuses is one "cannot start" line (exit 2), not a traceback."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from config.schema import Config
from daemon.lifecycle import load_knowledge, open_store
from daemon.runtime import run_daemon
from mape.knowledge import Knowledge, KnowledgeSettings
from mape.knowledge_store import KnowledgeStore
from messages.types import Decision


def _config(knowledge: str | Path) -> Config:
    return Config.model_validate({"knowledge": {"path": str(knowledge)}, "logging": {"level": "info"}})


def _saved(path: Path, iterations: int) -> None:
    store = KnowledgeStore(path)
    knowledge = Knowledge.fresh(KnowledgeSettings())
    for i in range(1, iterations + 1):
        knowledge.iteration, knowledge.last_time_s = i, 60.0 * i
        store.save(knowledge, Decision(60.0 * i, 1, 1, "hold"))
    store.close()


@contextmanager
def read_only(path: Path):
    """`path` unwritable for this process, root included (chattr +i; chmod binds only a non-root user)."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(mode & ~0o222)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    if (
        shutil.which("chattr") is None
        or subprocess.run(["chattr", "+i", path], capture_output=True).returncode
    ):
        pytest.skip("cannot make a file immutable here (chattr +i)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", path], check=True)


def test_fresh_leaves_a_store_another_daemon_holds_and_its_audit_log_alone(tmp_path, capsys):
    path, audit = tmp_path / "k.sqlite", tmp_path / "audit.jsonl"
    _saved(path, 3)
    audit.write_text('{"event": "the other daemon\'s"}\n')
    held = KnowledgeStore(path)  # the other daemon
    try:
        inode = path.stat().st_ino
        assert run_daemon(_config(path), max_iterations=1, fresh=True, audit_log=str(audit)) == 1
        assert "in use by another foresail daemon" in capsys.readouterr().err
        assert path.stat().st_ino == inode  # never deleted (a new file would be another inode)
        assert audit.read_text() == '{"event": "the other daemon\'s"}\n'
        assert held.load().iteration == 3
    finally:
        held.close()


def test_fresh_empties_the_store_and_the_audit_log_once_it_holds_the_store(tmp_path):
    path, audit = tmp_path / "k.sqlite", tmp_path / "audit.jsonl"
    _saved(path, 3)
    audit.write_text('{"event": "an earlier run"}\n')
    assert run_daemon(_config(path), max_iterations=1, fresh=True, audit_log=str(audit)) == 0
    assert "an earlier run" not in audit.read_text()
    assert '"daemon-started"' in audit.read_text()
    store = KnowledgeStore(path)
    assert store.load().iteration == 1
    store.close()


def _unreadable_loop(path: Path) -> None:
    """Content that opens fine but fails `load` (a NaN iteration), in the store and its snapshot."""
    for file in (path, Path(f"{path}.snapshot")):
        db = sqlite3.connect(file)
        loop = json.loads(db.execute("SELECT value FROM state WHERE key = 'loop'").fetchone()[0])
        loop["iteration"] = float("nan")
        db.execute("UPDATE state SET value = ? WHERE key = 'loop'", (json.dumps(loop),))
        db.commit()
        db.close()


def test_damage_found_while_loading_is_one_line_on_the_console(tmp_path, capsys):
    path = tmp_path / "k.sqlite"
    _saved(path, 3)
    _unreadable_loop(path)
    store = open_store(path)
    assert capsys.readouterr().err == ""  # the file itself opens: nothing found yet
    knowledge = load_knowledge(store, KnowledgeSettings())
    store.close()
    lines = capsys.readouterr().err.splitlines()
    assert knowledge.iteration == 0  # the loop's part starts fresh
    assert lines == [f"foresail: knowledge store {path}: unreadable loop started fresh, the rest kept"]
    assert len(knowledge.recent_decisions) == 3  # kept, and nothing moved aside
    assert not list(tmp_path.glob("*.corrupt-*"))


def test_a_sound_store_loads_without_a_word(tmp_path, capsys):
    path = tmp_path / "k.sqlite"
    _saved(path, 3)
    store = open_store(path)
    assert load_knowledge(store, KnowledgeSettings()).iteration == 3
    store.close()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("knowledge", "audit", "error"),
    [
        ("afile/k.sqlite", "a.jsonl", "FileExistsError"),
        ("afile/sub/k.sqlite", "a.jsonl", "NotADirectoryError"),
        ("a\0b.sqlite", "a.jsonl", "ValueError: embedded null byte"),
        ("x" * 300 + ".sqlite", "a.jsonl", f"[Errno {errno.ENAMETOOLONG}]"),
        ("k.sqlite", "afile/a.jsonl", "NotADirectoryError"),
        ("k.sqlite", "a\0.jsonl", "ValueError: embedded null byte"),
    ],
)
def test_a_path_the_file_system_refuses_is_one_line_and_exit_2(tmp_path, capsys, knowledge, audit, error):
    (tmp_path / "afile").write_text("a file, not a folder\n")
    config = _config(tmp_path / knowledge)
    assert run_daemon(config, max_iterations=1, audit_log=str(tmp_path / audit)) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("foresail: cannot start: ") and error in lines[0]


def test_a_read_only_store_is_refused_at_the_start(tmp_path, capsys):
    path = tmp_path / "k.sqlite"
    _saved(path, 3)
    before = path.read_bytes()
    with read_only(path):
        assert run_daemon(_config(path), max_iterations=1, audit_log=str(tmp_path / "a.jsonl")) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "cannot start: PermissionError" in lines[0] and "cannot be written" in lines[0]
    assert path.read_bytes() == before and not list(tmp_path.glob("k.sqlite.corrupt-*"))


def test_an_os_error_inside_the_run_is_not_taken_for_a_start_up_problem(tmp_path, monkeypatch):
    """Only the start-up steps are in the "cannot start" net: a failure after them keeps its traceback."""

    def broken(*args, **kwargs):
        raise OSError(errno.EIO, "a bug after the start")

    monkeypatch.setattr("daemon.runtime.score_since", broken)
    with pytest.raises(OSError, match="a bug after the start"):
        run_daemon(_config(tmp_path / "k.sqlite"), max_iterations=1, audit_log=str(tmp_path / "a.jsonl"))
