"""capacity/cores.py: CPU per busy second, and each TaskManager's core as a limit of the job graph."""

from __future__ import annotations

import math

import numpy as np
import pytest

from capacity.cores import CoreModel, contended_taskmanagers, taskmanager_busy
from capacity.dag import DagModel
from capacity.model import CapacitySettings
from capacity.subtask_windows import subtask_windows
from tests.capacity.test_dag import chain, learn, series

RECORDS = np.linspace(100.0, 400.0, 12)


def _two_vertices_on_one_core(model: DagModel):
    """v0 -> v1, one subtask each on tm-0, 1,000 records per busy second each: busy = records / 500."""
    graph = chain(1, 1)
    windows = learn(model, graph, [series(f"v{v}", 0, RECORDS, RECORDS / 1000.0) for v in (0, 1)])
    return graph, windows


def test_without_data_the_line_is_the_prior_a_busy_second_is_a_second_of_the_core():
    idle, per_busy = CoreModel(CapacitySettings(saturation_cpu=0.95, idle_cpu=0.11)).line()
    assert (idle, per_busy) == (pytest.approx(0.11), pytest.approx(0.84))


def test_the_line_is_learned_from_every_taskmanager_and_window():
    model = CoreModel()
    rng = np.random.default_rng(1)
    for _ in range(40):  # a vertex that mostly waits: CPU = 0.2 + 0.3 * busy, noisy
        busy = {f"tm-{i}": float(b) for i, b in enumerate(rng.uniform(0.1, 0.9, 4))}
        model.learn(busy, {tm: 0.2 + 0.3 * b + rng.normal(0, 0.01) for tm, b in busy.items()}, 60.0)
    idle, per_busy = model.line()
    assert idle == pytest.approx(0.2, abs=0.01) and per_busy == pytest.approx(0.3, abs=0.02)


def test_vertices_that_add_up_on_one_core_saturate_it_before_either_is_busy_all_the_time():
    dag = DagModel()
    graph, windows = _two_vertices_on_one_core(dag)
    cores = CoreModel()
    limit = cores.limit(dag, graph, windows, taskmanager_busy(windows), current=1, max_scaleout=3)
    # each vertex alone carries 1,000 rps; together they use 2 ms of the core per record
    assert dag.estimate(graph, windows, 1, 3).per_scaleout_rps[1] == pytest.approx(1000.0)
    assert limit.per_scaleout_rps[1] == pytest.approx(500.0, rel=1e-6)
    assert limit.taskmanager == "tm-0" and limit.busy == pytest.approx(RECORDS.mean() / 500.0)
    # two subtasks each at an unseen parallelism split the records: twice the rate
    assert limit.per_scaleout_rps[2] == pytest.approx(1000.0, rel=1e-6)


def test_busy_time_that_costs_little_cpu_lifts_the_cores_limit():
    dag = DagModel()
    graph, windows = _two_vertices_on_one_core(dag)
    cores = CoreModel()
    for _ in range(30):  # the CPU stays near idle however busy the subtasks are: they wait
        busy = {"tm-0": 0.2, "tm-1": 0.8}
        cores.learn(busy, {tm: 0.11 + 0.1 * b for tm, b in busy.items()}, 60.0)
    limit = cores.limit(dag, graph, windows, taskmanager_busy(windows), current=1, max_scaleout=1)
    assert limit.per_scaleout_rps[1] > 3_000.0  # the true rates (1,000 rps) bind, not the core


def test_a_vertex_with_busy_time_but_no_rate_yet_leaves_the_cores_unknown():
    # v1 is busy 30% without a record counted yet: how its busy time grows with the load is unknown
    dag = DagModel()
    graph = chain(1, 1)
    windows = learn(dag, graph, [series("v0", 0, RECORDS, RECORDS / 1000.0), series("v1", 0, 0.0, 0.3)])
    assert math.isnan(dag.subtask_rate_rps("v1", 1, 0))
    assert CoreModel().limit(dag, graph, windows, taskmanager_busy(windows), 1, 2).per_scaleout_rps == {}


def test_a_taskmanager_missing_one_subtasks_busy_time_is_left_out():
    graph = chain(2, 2)
    subtasks = [series("v0", i, 100.0, 0.1) for i in range(2)] + [series("v1", 0, 100.0, 0.2)]
    subtasks.append(series("v1", 1, 100.0, np.nan))
    windows = learn(DagModel(), graph, subtasks)
    assert taskmanager_busy(windows) == {"tm-0": pytest.approx(0.3)}


def test_the_model_survives_a_restart():
    cores = CoreModel()
    cores.learn({"tm-0": 0.5, "tm-1": 0.2}, {"tm-0": 0.5, "tm-1": 0.3}, 60.0)
    cores.overhead_busy = 0.01
    again = CoreModel.from_dict(cores.to_dict())
    assert again.line() == cores.line() and again.overhead_busy == 0.01
    assert math.isclose(CoreModel.from_dict({}).line()[0], CapacitySettings().idle_cpu)


def test_a_subtask_far_slower_than_its_siblings_near_saturation_waits_for_its_core():
    """A source subtask reading 6,000 records per busy second beside siblings at 100,000 (their ratio only
    under-states their rate) waits for a core its keyed neighbour took, even where a line of CPU per busy
    second, learned from inflated busy time, says the core serves more: that reading is no rate."""
    graph = chain(3, 3, keyed=(1,))
    model = CoreModel(CapacitySettings(saturation_cpu=0.95, idle_cpu=0.05))
    for _ in range(40):  # the line says a busy second costs 0.3 CPU: the core serves 3 busy seconds
        model.learn({"tm-0": 0.5, "tm-1": 1.5}, {"tm-0": 0.2, "tm-1": 0.5}, 60.0)
    sources = [series("v0", i, 3000.0, busy) for i, busy in enumerate((0.03, 0.03, 0.5))]
    keyed = [series("v1", i, 3000.0, busy) for i, busy in enumerate((0.6, 0.6, 0.95))]
    windows = subtask_windows(sources + keyed, graph, uptime_s=3600.0, now_s=60.0, warmup_s=0.0)
    cpu = {"tm-0": 0.7, "tm-1": 0.7, "tm-2": 0.9}
    assert contended_taskmanagers(windows, cpu, model, keyed=frozenset({"v1"})) == {"tm-2"}
    # not near saturation: the slow one waits on something else (its store), and it is its rate
    assert (
        contended_taskmanagers(windows, {**cpu, "tm-2": 0.4}, model, keyed=frozenset({"v1"})) == frozenset()
    )
    # sources alike: 0.98 busy seconds on tm-2, under the 3 the line says its core serves; and a keyed
    # vertex's subtasks differ in the state they hold, so no sibling tells another's rate
    evenly = [series("v0", i, 3000.0, 0.03) for i in range(3)]
    windows = subtask_windows(evenly + keyed, graph, uptime_s=3600.0, now_s=60.0, warmup_s=0.0)
    assert contended_taskmanagers(windows, cpu, model, keyed=frozenset({"v1"})) == frozenset()


def test_a_shared_core_counts_as_contended_at_saturation_or_overbooked_near_it_not_for_a_waiting_sink():
    graph = chain(1, 1)
    model = CoreModel(CapacitySettings(saturation_cpu=0.95, idle_cpu=0.05))
    both_busy = [series(f"v{v}", 0, RECORDS, 0.9) for v in (0, 1)]  # 1.8 busy seconds on one core
    windows = subtask_windows(both_busy, graph, uptime_s=3600.0, now_s=60.0, warmup_s=0.0)
    assert contended_taskmanagers(windows, {"tm-0": 0.96}, model) == {"tm-0"}  # saturated
    assert contended_taskmanagers(windows, {"tm-0": 0.9}, model) == {"tm-0"}  # overbooked, near it
    assert contended_taskmanagers(windows, {"tm-0": 0.3}, model) == frozenset()  # busy waiting, not computing
    alone = [series("v0", 0, RECORDS, 1.0), series("v1", 0, RECORDS, 0.01)]  # one subtask busy all the time
    windows = subtask_windows(alone, graph, uptime_s=3600.0, now_s=60.0, warmup_s=0.0)
    assert contended_taskmanagers(windows, {"tm-0": 0.9}, model) == frozenset()
    assert contended_taskmanagers(windows, {"tm-0": 0.96}, model) == frozenset()  # saturated by it alone
