"""capacity/cores.py under hostile conditions: a line that cannot bound the rate, a change of the cores per
TaskManager, stored states of older versions or no window."""

from __future__ import annotations

import math

import numpy as np
import pytest
from structlog.testing import capture_logs

from capacity.cores import CoreModel, taskmanager_busy
from capacity.dag import DagModel
from capacity.model import CapacitySettings
from tests.capacity.test_dag import chain, learn, series

RECORDS = np.linspace(100.0, 400.0, 12)
SETTINGS = CapacitySettings(saturation_cpu=0.95, idle_cpu=0.11)


def _two_vertices_on_one_core():
    """v0 -> v1 on tm-0, 1,000 records per busy second each: a core carries 500 rps at 0.84 CPU per busy s."""
    dag, graph = DagModel(), chain(1, 1)
    windows = learn(dag, graph, [series(f"v{v}", 0, RECORDS, RECORDS / 1000.0) for v in (0, 1)])
    return dag, graph, windows


def _limit(cores: CoreModel, max_scaleout: int = 3):
    dag, graph, windows = _two_vertices_on_one_core()
    return cores.limit(dag, graph, windows, taskmanager_busy(windows), 1, max_scaleout)


def test_an_idle_cpu_at_the_saturation_bounds_no_scale_out_and_is_said_once():
    cores = CoreModel(SETTINGS)
    for _ in range(30):  # the CPU at 0.97 while the subtasks are busy 5-15%: GC, compaction, uploads
        cores.learn({"tm-0": 0.05, "tm-1": 0.15}, {"tm-0": 0.97, "tm-1": 0.98}, 60.0)
    assert cores.line()[0] >= SETTINGS.saturation_cpu - 0.01
    with capture_logs() as events:
        first, again = _limit(cores), _limit(cores)
    assert first.per_scaleout_rps == {} and again.per_scaleout_rps == {}  # not 0 rps everywhere
    assert "idle CPU" in first.unusable
    assert [e["event"] for e in events] == ["cores-line-unusable"]


def test_fixed_busy_that_fills_the_core_bounds_no_scale_out():
    cores = CoreModel(SETTINGS, overhead_busy=1.5)  # a core carries 1 busy s per s by the prior line
    dag, graph, windows = _two_vertices_on_one_core()
    with capture_logs():
        limit = cores.limit(dag, graph, windows, {}, 1, 3)  # no busy time this window: the stored overhead
    assert limit.per_scaleout_rps == {} and "fixed busy" in limit.unusable


def test_a_usable_line_says_nothing_and_keeps_its_limit():
    with capture_logs() as events:
        limit = _limit(CoreModel(SETTINGS))
    assert limit.per_scaleout_rps[1] == pytest.approx(500.0) and limit.unusable == "" and events == []


def _run(
    cores: CoreModel, windows: int, cpu_per_busy: float, rng: np.random.Generator, interval_s: float = 60.0
) -> None:
    for _ in range(windows):
        busy = {f"tm-{i}": float(b) for i, b in enumerate(rng.uniform(0.1, 0.9, 4))}
        cores.learn(
            busy, {tm: 0.11 + cpu_per_busy * b + rng.normal(0, 0.01) for tm, b in busy.items()}, interval_s
        )


@pytest.mark.parametrize(("before", "after"), [(0.42, 0.84), (0.84, 0.42)])
def test_a_change_of_the_cores_per_taskmanager_is_learned_within_days(before, after):
    """Three days of 60-s windows on one setup, then five on the other (2 cores <-> 1 per TaskManager):
    without forgetting the line stayed near the old setup for days (the 2-to-1 way overstates the limit)."""
    rng = np.random.default_rng(0)
    cores = CoreModel(SETTINGS)
    _run(cores, 3 * 1440, before, rng)
    _run(cores, 5 * 1440, after, rng)
    assert cores.line()[1] == pytest.approx(after, rel=0.05)
    assert _limit(cores, 1).per_scaleout_rps[1] == pytest.approx(500.0 * 0.84 / after, rel=0.05)


@pytest.mark.parametrize("interval_s", [60.0, 30.0, 15.0])
def test_the_line_forgets_by_the_day_whatever_the_loop_interval(interval_s):
    """Three days on one setup, then one on the other: the new day weighs what a day's half-life gives it,
    also at a shorter loop (counted in windows, a 30-s loop forgot twice as fast as it said)."""
    per_day = round(86_400 / interval_s)
    cores = CoreModel(SETTINGS)
    _run(cores, 3 * per_day, 0.42, np.random.default_rng(3), interval_s)
    _run(cores, per_day, 0.84, np.random.default_rng(4), interval_s)
    new_share = (1 - 0.5) / (1 - 0.5**4)  # weight of the last day among four, each day half the next
    assert cores.line()[1] == pytest.approx(0.42 + (0.84 - 0.42) * new_share, rel=0.03)


def test_a_state_stored_before_the_half_life_loads_and_fades():
    old = CoreModel(SETTINGS)
    _run(old, 300, 0.42, np.random.default_rng(1))
    stored = old.to_dict()
    stored["stats"] = {**stored["stats"], "n": 1200}  # a count of points, never faded
    loaded = CoreModel.from_dict(stored, SETTINGS)
    assert loaded.stats.n == 1200 and loaded.line()[1] == pytest.approx(0.42, rel=0.02)
    _run(loaded, 4 * 1440, 0.84, np.random.default_rng(2))  # 4 half-lives
    assert loaded.line()[1] == pytest.approx(0.84, rel=0.1)
    again = CoreModel.from_dict(loaded.to_dict(), SETTINGS)  # a faded count is a weight
    assert again.stats == loaded.stats and again.line() == loaded.line()


@pytest.mark.parametrize(
    "stats",
    [
        {"m2_x": math.nan},
        {"mean_y": math.inf},
        {"m2_x": -1.0},
        {"n": -3},
    ],
)
def test_sums_no_windows_give_are_refused_so_the_knowledge_starts_the_cores_fresh(stats):
    good = {"n": 3, "mean_x": 0.5, "mean_y": 0.6, "m2_x": 0.18, "m2_y": 0.18, "c_xy": 0.18}
    with pytest.raises(ValueError):
        CoreModel.from_dict({"stats": {**good, **stats}}, SETTINGS)
    with pytest.raises(ValueError):
        CoreModel.from_dict({"stats": good, "overhead_busy": -0.5}, SETTINGS)
