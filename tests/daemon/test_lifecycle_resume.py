"""Resuming from a damaged or edited store: a stored loop time, twin state or scale-out that is not a finite
number in its range is dropped with one warning (the twin replays the trace from its start), never a
traceback or a NaN score."""

from __future__ import annotations

import json
import math
import re
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from config.schema import Config
from daemon.runtime import run_daemon
from simulator.score import mark, score, score_since
from simulator.twin import Twin


def _config(path: Path) -> Config:
    return Config.model_validate({"knowledge": {"path": str(path)}, "logging": {"level": "info"}})


@pytest.fixture(scope="module")
def base_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store three iterations into the twin (its state saved with them)."""
    path = tmp_path_factory.mktemp("base") / "k.sqlite"
    assert run_daemon(_config(path), max_iterations=3, audit_log=str(path.parent / "audit.jsonl")) == 0
    return path


def _edited(base: Path, directory: Path, key: str, **values: object) -> Path:
    """A copy of the store (and its snapshot) whose state row `key` has `values`."""
    path = directory / "k.sqlite"
    for suffix in ("", ".snapshot"):
        shutil.copyfile(f"{base}{suffix}", f"{path}{suffix}")
        db = sqlite3.connect(f"{path}{suffix}")
        row = json.loads(db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()[0])
        db.execute("UPDATE state SET value = ? WHERE key = ?", (json.dumps(row | values), key))
        db.commit()
        db.close()
    return path


def _resumed(path: Path, capsys) -> tuple[list[dict], str]:
    """Run two more iterations (a surge watch may be one); their audit events and the stderr."""
    audit = path.parent / "resumed.jsonl"
    assert run_daemon(_config(path), max_iterations=2, audit_log=str(audit)) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "on the digital twin" in err  # the summary: the run was scored
    return [json.loads(line) for line in audit.read_text().splitlines()], err


def _first_time_s(events: list[dict]) -> float:
    """When the resumed run's first iteration ran (the stored run stopped at 180 s)."""
    return min(e["time_s"] for e in events if e["event"] == "iteration")


def _events(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e["event"] == name]


@pytest.mark.parametrize("last_time_s", [math.nan, math.inf, -5.0, "60"])
def test_a_stored_loop_time_that_is_no_time_resumes_from_the_trace_start(
    base_store, tmp_path, capsys, last_time_s
):
    path = _edited(base_store, tmp_path, "loop", last_time_s=last_time_s)
    events, _ = _resumed(path, capsys)
    assert len(_events(events, "stored-time-ignored")) == 1
    assert _first_time_s(events) < 180.0


def test_a_sound_store_resumes_where_it_stopped_without_a_warning(base_store, tmp_path, capsys):
    path = _edited(base_store, tmp_path, "loop")
    events, err = _resumed(path, capsys)
    assert _first_time_s(events) > 180.0
    assert not [e for e in events if e.get("level") == "warning"]
    assert "resuming at iteration 3" in err


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("t", None),
        ("parallelism", math.inf),
        ("high_water", math.nan),
        ("position", -5),
        ("log_end", 1.5),
        ("carry", None),
        ("carry", math.inf),
        ("running", "yes"),
        ("resume_at", -1),
        ("managed_mb", math.nan),
    ],
)
def test_a_twin_state_value_out_of_range_replays_the_trace_instead(
    base_store, tmp_path, capsys, field, value
):
    path = _edited(base_store, tmp_path, "attached:twin", **{field: value})
    events, _ = _resumed(path, capsys)
    assert len(_events(events, "twin-state-not-restored")) == 1
    assert _first_time_s(events) > 180.0  # the loop resumes where it stopped, the twin replayed to there
    restored = sqlite3.connect(path).execute("SELECT value FROM state WHERE key = 'attached:twin'").fetchone()
    saved = json.loads(restored[0])  # the replayed job's state, whole again
    assert all(math.isfinite(saved[name]) and saved[name] >= 0 for name in ("t", "position", "high_water"))


@pytest.mark.parametrize("scaleout", [-3, 1_000_000, 9.5, "x"])
def test_a_stored_scaleout_the_twin_cannot_run_is_not_used(base_store, tmp_path, capsys, scaleout):
    path = _edited(base_store, tmp_path, "loop", last_target_scaleout=scaleout)
    db = sqlite3.connect(path)
    db.execute("DELETE FROM state WHERE key = 'attached:twin'")  # no twin state: rebuilt at the scale-out
    db.commit()
    db.close()
    Path(f"{path}.snapshot").unlink()
    events, _ = _resumed(path, capsys)
    assert len(_events(events, "stored-scaleout-ignored")) == 1
    iteration = _events(events, "iteration")[0]
    assert iteration["inputs"]["parallelism"] == _config(path).twin_initial_scaleout


def _twins() -> tuple[Twin, Twin]:
    """A twin 100 s into its trace with a backlog, and a fresh one at the same parallelism."""
    trace = np.full(600, 5000.0)
    ran = Twin(trace, parallelism=2)
    ran.advance_to(100)
    return ran, Twin(trace, parallelism=2)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("t", math.inf),
        ("t", 10.5),
        ("log_end", math.inf),
        ("position", -5),
        ("position", 10**12),  # past the log end
        ("processed_total", None),
        ("carry", math.nan),
        ("running", 1),
        ("restarts", True),
        ("managed_mb", -1.0),
    ],
)
def test_restore_refuses_a_value_out_of_range_and_leaves_the_twin_as_it_was(field, value):
    ran, fresh = _twins()
    state = ran.snapshot() | {field: value}
    with pytest.raises(ValueError, match=field if field != "position" or value < 0 else "out of order"):
        fresh.restore(state)
    assert fresh.now_s == 0.0 and fresh.backlog_records == 0


def test_restore_refuses_the_offsets_of_another_trace():
    """A store from another twin.workload carried its backlog over: more records waiting than this trace
    had brought, which the latency gauge read as records from before the trace began."""
    ran, _ = _twins()
    other = Twin(np.full(600, 500.0), parallelism=2)
    with pytest.raises(ValueError, match="log_end"):
        other.restore(ran.snapshot())
    assert other.now_s == 0.0


def test_restore_takes_over_a_sound_snapshot():
    ran, fresh = _twins()
    fresh.restore(ran.snapshot())
    assert fresh.snapshot() == ran.snapshot()


def test_a_resumed_runs_summary_scores_only_the_seconds_it_ran(base_store, tmp_path, capsys):
    # the twin resumes by replaying the trace to where the daemon stopped at the stored scale-out: at one
    # worker the replay falls far behind the sine's 33,000 rps (no such thing happened), which the summary
    # of the resumed run must not count as its own
    path = _edited(base_store, tmp_path, "attached:twin", parallelism=1)
    events, err = _resumed(path, capsys)
    ran_s = max(e["time_s"] for e in _events(events, "iteration")) - 180.0
    over = re.search(r"(\d+) s over the 30.00 s SLO", err)
    assert over and int(over.group(1)) <= ran_s, err
    workers = re.search(r"(min (\d+), max (\d+)\)); ([\d.]+) on average in this run", err)
    assert workers and int(workers.group(2)) <= float(workers.group(4)) <= int(workers.group(3)), err


def test_a_runs_score_since_a_mark_leaves_out_what_came_before():
    trace = np.full(1800, 5000.0)
    twin = Twin(trace, parallelism=1)  # sized for 12 workers: one falls far behind
    twin.advance_to(300)
    twin.scale_to(18, 300)
    twin.advance_to(1500)
    assert twin.backlog_records == 0
    start = mark(twin)
    twin.advance_to(1800)
    since, whole = score_since(twin, start), score(twin)
    assert whole["seconds_over_slo"] > 200 and since["seconds_over_slo"] == 0
    assert since["avg_workers"] == 18 and since["duration_s"] == 300
    assert since["max_latency_s"] < 30 < whole["max_latency_s"]
